package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/webhook"
)

// DefaultCallbackAddr is where a local platform's sample callback receiver
// listens (HTTPS, the development CA's "callbacks" certificate).
const DefaultCallbackAddr = "127.0.0.1:7095"

// callbackCertName is the sample receiver's certificate, which test
// receivers share: any loopback HTTPS server the cells can verify.
const callbackCertName = "callbacks"

// CallbackCertFiles are a loopback server certificate and key issued by
// the development CA, which every cell trusts for callbacks: the sample
// receiver's, and test receivers'.
func (p *Platform) CallbackCertFiles() (cert, key string) {
	dir := filepath.Join(p.cfg.DataDir, pkiDir)
	return pki.CertFile(dir, callbackCertName), pki.KeyFile(dir, callbackCertName)
}

// CallbackURL is the sample receiver's endpoint for partner id, "" when
// the platform runs none.
func (p *Platform) CallbackURL(id string) string { return callbackURL(p.cfg.CallbackAddr, id) }

func callbackURL(addr, id string) string {
	if addr == "" {
		return ""
	}
	return "https://" + addr + "/callbacks/" + id
}

// CallbackLog is the sample receiver's log of the events it took.
func (p *Platform) CallbackLog() string { return filepath.Join(p.logDir, "callbacks.log") }

// secretFile is where a sample partner's callback signing secret is kept,
// beside its API key (mode 0600): what the partner's receiver verifies with.
func secretFile(keyDir, id string) string { return filepath.Join(keyDir, id+".whsec") }

// startReceiver serves the sample partners' callbacks, one path per
// partner, each verified with that partner's secret, and logs every event
// it takes (IDs and status, never a secret) as JSON lines.
func (p *Platform) startReceiver() error {
	ca, err := pki.EnsureCA(filepath.Join(p.cfg.DataDir, pkiDir))
	if err != nil {
		return err
	}
	if err := ca.EnsureCert(callbackCertName, []string{"127.0.0.1", "::1", "localhost"}, pki.Server); err != nil {
		return err
	}
	if p.cfg.CallbackAddr == "" {
		return nil
	}
	logFile, err := os.OpenFile(p.CallbackLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	var logMu sync.Mutex
	mux := http.NewServeMux()
	for _, id := range SamplePartners {
		b, err := os.ReadFile(secretFile(p.PartnerKeyDir(), id))
		if err != nil {
			logFile.Close()
			return err
		}
		secret := strings.TrimSpace(string(b))
		h, err := client.CallbackHandler(client.CallbackConfig{
			Secrets: func() []string { return []string{secret} },
			Handle: func(_ context.Context, cb client.Callback) error {
				line, _ := json.Marshal(map[string]any{"received_at": time.Now().UTC(), "event_id": cb.ID, "partner_id": id,
					"transaction_id": cb.Transaction.GetTransactionId(), "status": cb.Transaction.GetStatus().String(),
					"cell_id": cb.Transaction.GetCellId(), "lag_ms": time.Since(cb.Recorded).Milliseconds()})
				logMu.Lock()
				defer logMu.Unlock()
				_, err := logFile.Write(append(line, '\n'))
				return err
			},
		})
		if err != nil {
			logFile.Close()
			return err
		}
		mux.Handle("/callbacks/"+id, h)
	}
	cert, key := p.CallbackCertFiles()
	tlsCfg, stopTLS, err := tlsconf.ServerConfig(cert, key, time.Minute)
	if err != nil {
		logFile.Close()
		return err
	}
	l, err := net.Listen("tcp", p.cfg.CallbackAddr)
	if err != nil {
		stopTLS()
		logFile.Close()
		return fmt.Errorf("sample callback receiver: %w", err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: tlsCfg, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(p.cfg.Stderr, "[callbacks] receiver stopped:", err)
		}
	}()
	p.stopReceiver = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		stopTLS()
		logFile.Close()
	}
	return nil
}

// sampleSecret returns partner id's signing secret, made and kept in its
// file the first time.
func sampleSecret(keyDir, id string) (string, error) {
	path := secretFile(keyDir, id)
	if b, err := os.ReadFile(path); err == nil {
		if s := strings.TrimSpace(string(b)); strings.HasPrefix(s, "whsec_") {
			return s, nil
		}
	}
	s, err := webhook.NewSecret(nil)
	if err != nil {
		return "", err
	}
	return s, os.WriteFile(path, []byte(s+"\n"), 0o600)
}
