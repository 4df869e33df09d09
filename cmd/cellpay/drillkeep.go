package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/dev/drill"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/drillreport"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// signDrill signs the drill's report with the operators' certificate of
// the platform on data (pki/ops.crt and ops.key).
func signDrill(data string, rep drill.Report) (drillreport.Signed, error) {
	f := platform.TLSFiles(data, platform.OpsCertName)
	cert, err := tlsconf.LoadKeyPair(f.Cert, f.Key)
	if err != nil {
		return drillreport.Signed{}, fmt.Errorf("the operators' certificate: %w", err)
	}
	return rep.Sign(cert)
}

// writeSigned writes a signed report to file, as JSON (drillreport.Signed:
// the report's bytes, signature and certificate, base64).
func writeSigned(file string, s drillreport.Signed) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// keepDrill records a signed report through the admin API at addr (the
// primary access point's), with the operator token in tokenFile, and
// returns its ID.
func keepDrill(ctx context.Context, data, addr, tokenFile string, s drillreport.Signed) (string, error) {
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		return "", fmt.Errorf("operator token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("operator token: %s is empty", tokenFile)
	}
	creds, err := platform.ClientTLSTo(data, platform.OpsCertName, hop.GTR)
	if err != nil {
		return "", err
	}
	conn, err := grpc.NewClient(addr, creds, grpc.WithPerRPCCredentials(bearer(tok)))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := adminproto.NewAdminClient(conn).RecordDrill(ctx, &adminproto.RecordDrillRequest{Report: &adminproto.SignedDrillReport{
		Report: s.Report, Signature: s.Signature, Certificate: s.Certificate}})
	if err != nil {
		return "", fmt.Errorf("admin API %s: %w", addr, err)
	}
	return resp.GetId(), nil
}

// defaultDrillToken is the operator role's token file of a local
// platform (RecordDrill needs the operator role; the admin's would do,
// but the least role that may is the one to use).
func defaultDrillToken(data string) string { return filepath.Join(data, "operators", "operator.token") }

// bearer sends the operator's token as "authorization: Bearer <token>".
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }
