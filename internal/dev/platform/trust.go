package platform

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"gopkg.in/yaml.v3"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/client"
)

// SamplePartners are the partners a local platform registers, one API key
// each: p-001 to p-050, the load tool's default spread.
var SamplePartners = func() []string {
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("p-%03d", i+1)
	}
	return ids
}()

// Where a local platform keeps its trust material, under DataDir:
//
//	pki/ca.crt                 the development CA, for clients to trust
//	pki/gtr.crt, pki/gtr.key   the GTR's certificate: partners' listener, and its
//	                           client identity towards the cells (hop.GTR)
//	pki/<cell>.crt, .key       each cell's (hop.Cell(id)): server and client to the issuer
//	pki/issuer.crt, .key       the issuer simulator's (hop.Issuer)
//	pki/postgres-<cell>.crt, .key  each cell's private Postgres server, for loopback
//	                           (pgcluster copies them into the cluster, owned by its user)
//	pki/ops.crt, .key          operators' and tests' tools (hop.Ops): the launcher's
//	                           health checks, the checker's Effects
//	pki/nats.crt, .key         the NATS server's (TLS only, for its address)
//	pki/replicator.crt, .key   the replicator's NATS identity (hop.Replicator)
//	pki/nats-admin.crt, .key   NATS's administrator (hop.NATSAdmin): launcher, tests
//	nats.conf                  NATS's configuration: TLS and a user per identity (natsauth)
//	partners/<partner>.key     each sample partner's API key (mode 0600)
//	partners.yaml              the partner registry the GTR starts from (hashes only)
//	operators/<role>.token     an admin API token per role, operator ID = role (mode 0600)
//	operators.yaml             the GTR's operators file (hashes only)
const (
	pkiDir        = "pki"
	partnersDir   = "partners"
	partnersFile  = "partners.yaml"
	operatorsDir  = "operators"
	operatorsFile = "operators.yaml"
	gtrCertName   = "gtr"
	// IssuerCertName and OpsCertName name the issuer's and the tools'
	// certificates for TLSFiles; a cell's is named by its ID, the GTR's
	// by GTR.
	IssuerCertName = "issuer"
	OpsCertName    = "ops"
)

// SampleOperators are a local platform's operators: one per role, each
// named after its role.
var SampleOperators = []operators.Role{operators.RoleViewer, operators.RoleOperator, operators.RoleAdmin}

// provisionTrust makes the development CA, the GTR's certificate and the
// sample partners' keys and registry, keeping whatever is already there
// and still good, so that a restarted platform keeps its keys (a running
// NATS KV bucket or a GTR state file may hold the registry already).
func (p *Platform) provisionTrust() error {
	dir := p.cfg.DataDir
	ca, err := pki.EnsureCA(filepath.Join(dir, pkiDir))
	if err != nil {
		return err
	}
	for _, c := range hopCerts(p.cfg) {
		if err := ca.EnsureCert(c.name, c.hosts, c.usage); err != nil {
			return err
		}
	}
	if err := ensureOperators(filepath.Join(dir, operatorsDir), p.OperatorsFile()); err != nil {
		return err
	}
	return ensurePartners(filepath.Join(dir, partnersDir), filepath.Join(dir, partnersFile), SamplePartners, p.cfg.CallbackAddr)
}

// RotateCertificates issues every certificate of the platform again, with
// new keys, in place (each file replaced by a rename, as cert-manager's
// Secret updates are), and has every running server take its new one
// without a restart:
//
//   - the GTR, the cells and the issuer re-read theirs within
//     tlsconf.DefaultRefresh by themselves (gRPC servers and clients alike);
//   - NATS's server certificate and its clients' (the replicator's, NATS's
//     administrator's, and the GTR's and cells' hop certificates, which
//     are their NATS identities): NATS is sent SIGHUP, and
//     RotateCertificates waits until it presents the new certificate;
//     clients read theirs at each TLS handshake (package natsconn), so a
//     reconnect presents the new one;
//   - each cell's Postgres, primary and standby (one certificate for
//     both): the files are copied into their data dirs again and
//     pg_reload_conf() is run, as the superuser over the Unix socket.
//
// Connections already open keep going on the certificates they were set
// up with. The CA is kept: the gRPC components and the cells' database
// pools read its file once, at start (NATS clients at each connect), so a
// new CA needs restarts.
func (p *Platform) RotateCertificates() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca, err := pki.EnsureCA(filepath.Join(p.cfg.DataDir, pkiDir))
	if err != nil {
		return err
	}
	certs := hopCerts(p.cfg)
	if p.cfg.NATS {
		host, _, _ := net.SplitHostPort(p.cfg.NATSAddr)
		certs = append(certs, natsCerts(host)...)
	}
	for _, c := range certs {
		if err := ca.Issue(c.name, c.hosts, c.usage); err != nil {
			return err
		}
	}
	var errs []error
	if p.cfg.NATS {
		errs = append(errs, p.reloadNATS(ctx))
	}
	errs = append(errs, p.rotatePostgres(ctx, ca))
	return errors.Join(errs...)
}

// loopbackHosts are what a server certificate for this machine covers.
var loopbackHosts = []string{"127.0.0.1", "::1", "localhost"}

// certSpec is a certificate to issue: its file name, hosts (DNS names,
// addresses, identity URIs) and usage.
type certSpec struct {
	name  string
	hosts []string
	usage pki.Usage
}

// hopCerts are the certificates of the GTR (partners' listener and client
// to the cells, for the access points' hosts), of each cell and the issuer
// for their addresses (and a cell's for its name in the domain,
// cell-a.cellpay.internal), and the tools' client identity.
func hopCerts(cfg Config) []certSpec {
	loopback := loopbackHosts
	withHost := func(addrs []string, more ...string) []string {
		hosts := append(slices.Clone(loopback), more...)
		for _, addr := range addrs {
			if h, _, err := net.SplitHostPort(addr); err == nil && h != "" && !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
		return hosts
	}
	certs := []certSpec{{gtrCertName, withHost([]string{cfg.GTRAddr, cfg.BackupGTRAddr}, hop.GTR), pki.Server | pki.Client}}
	for _, c := range cfg.Cells {
		certs = append(certs, certSpec{c.ID, withHost([]string{c.Addr}, hop.CellHost(c.ID), hop.Cell(c.ID)), pki.Server | pki.Client})
	}
	return append(certs,
		certSpec{IssuerCertName, withHost([]string{cfg.IssuerAddr}, hop.Issuer), pki.Server},
		certSpec{OpsCertName, []string{hop.Ops}, pki.Client})
}

// ensurePostgresCert issues the server certificate name of a cell's
// private Postgres, for the loopback addresses (cells verify it with
// sslmode=verify-full). It runs before provisionTrust: the databases start
// first.
func ensurePostgresCert(dataDir, name string) (tlsconf.Files, error) {
	ca, err := pki.EnsureCA(filepath.Join(dataDir, pkiDir))
	if err != nil {
		return tlsconf.Files{}, err
	}
	if err := ca.EnsureCert(name, loopbackHosts, pki.Server); err != nil {
		return tlsconf.Files{}, err
	}
	return TLSFiles(dataDir, name), nil
}

// ensureOperators keeps the operators file and token files when every
// sample operator's token authenticates with its role, and writes new
// ones otherwise.
func ensureOperators(tokenDir, file string) error {
	if err := os.MkdirAll(tokenDir, 0o700); err != nil {
		return err
	}
	if f, err := operators.Load(file); err == nil {
		if ix, err := operators.Compile(f, ""); err == nil && ix.Len() == len(SampleOperators) {
			ok := true
			for _, role := range SampleOperators {
				tok, err := operators.ReadTokenFile(filepath.Join(tokenDir, role.String()+".token"))
				op, aerr := ix.Authenticate(tok)
				ok = ok && err == nil && aerr == nil && op.Role == role
			}
			if ok {
				return nil
			}
		}
	}
	var f operators.File
	for _, role := range SampleOperators {
		tok, op, err := operators.NewToken(nil, role.String(), role)
		if err != nil {
			return err
		}
		if err := operators.WriteTokenFile(filepath.Join(tokenDir, role.String()+".token"), tok); err != nil {
			return err
		}
		f.Operators = append(f.Operators, op)
	}
	return operators.WriteFile(file, &f)
}

// OperatorsFile is the GTR's operators file.
func (p *Platform) OperatorsFile() string { return filepath.Join(p.cfg.DataDir, operatorsFile) }

// OperatorTokenFile is the token file of the sample operator with role.
func (p *Platform) OperatorTokenFile(role operators.Role) string {
	return filepath.Join(p.cfg.DataDir, operatorsDir, role.String()+".token")
}

// AdminTokenFile is the admin operator's token file, the one gtrctl uses
// by default.
func (p *Platform) AdminTokenFile() string { return p.OperatorTokenFile(operators.RoleAdmin) }

// ensurePartners keeps the registry file and key files when every partner
// has a key file whose key the registry authenticates (and, with a sample
// callback receiver at callbackAddr, callbacks to it signed with the
// secret in its file), and writes new ones otherwise.
func ensurePartners(keyDir, regFile string, ids []string, callbackAddr string) error {
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		return err
	}
	callbacks := func(id string) (partners.Callbacks, error) {
		if callbackAddr == "" {
			return partners.Callbacks{}, nil
		}
		secret, err := sampleSecret(keyDir, id)
		if err != nil {
			return partners.Callbacks{}, err
		}
		return partners.Callbacks{Mode: partners.ModeOrdered, Endpoints: []string{callbackURL(callbackAddr, id)}, Secrets: []string{secret}}, nil
	}
	if reg, err := partners.Load(regFile); err == nil {
		if ix, err := partners.Compile(reg); err == nil && allAuthenticate(ix, keyDir, ids) && sameCallbacks(ix, ids, callbacks) {
			return nil
		}
	}
	reg := &partners.Registry{Version: 1}
	now := time.Now()
	for _, id := range ids {
		plain, key, err := partners.NewKey(nil, now)
		if err != nil {
			return err
		}
		if err := partners.WriteKeyFile(partners.KeyFile(keyDir, id), plain); err != nil {
			return err
		}
		cb, err := callbacks(id)
		if err != nil {
			return err
		}
		reg.Partners = append(reg.Partners, partners.Partner{ID: id, Status: partners.StatusActive, Keys: []partners.Key{key}, Callbacks: cb})
	}
	b, err := yaml.Marshal(reg)
	if err != nil {
		return err
	}
	b = append([]byte("# The sample partners of a local platform, written by cellpay: API key hashes\n# only (their keys are in partners/<id>.key beside this file), and their\n# callback signing secrets (also in partners/<id>.whsec): mode 0600.\n"), b...)
	if err := os.WriteFile(regFile, b, 0o600); err != nil {
		return err
	}
	return os.Chmod(regFile, 0o600) // an older file was 0644
}

// sameCallbacks reports whether every partner's callbacks are what want
// makes.
func sameCallbacks(ix *partners.Index, ids []string, want func(string) (partners.Callbacks, error)) bool {
	for _, id := range ids {
		p, ok := ix.Partner(id)
		w, err := want(id)
		if !ok || err != nil || p.Callbacks.Mode != w.Mode || !slices.Equal(p.Callbacks.Endpoints, w.Endpoints) || !slices.Equal(p.Callbacks.Secrets, w.Secrets) {
			return false
		}
	}
	return true
}

func allAuthenticate(ix *partners.Index, keyDir string, ids []string) bool {
	for _, id := range ids {
		k, err := partners.ReadKeyFile(partners.KeyFile(keyDir, id))
		if err != nil {
			return false
		}
		if p, err := ix.Authenticate(k); err != nil || p.ID != id {
			return false
		}
	}
	return true
}

// CAFile is the development CA's certificate, which every client of the
// platform trusts.
func (p *Platform) CAFile() string { return filepath.Join(p.cfg.DataDir, pkiDir, pki.CAFile) }

// GTRCertFiles are the GTR partners' listener certificate and key, for
// tests and tools that run another GTR replica beside the platform's.
func (p *Platform) GTRCertFiles() (cert, key string) {
	dir := filepath.Join(p.cfg.DataDir, pkiDir)
	return pki.CertFile(dir, gtrCertName), pki.KeyFile(dir, gtrCertName)
}

// TLSFiles are the certificate, key and CA of name on the internal hops:
// GTR, a cell's ID, IssuerCertName or OpsCertName.
func (p *Platform) TLSFiles(name string) tlsconf.Files { return TLSFiles(p.cfg.DataDir, name) }

// TLSFiles is Platform.TLSFiles for the platform whose data folder is
// dataDir (a tool outside the launcher's process).
func TLSFiles(dataDir, name string) tlsconf.Files {
	dir := filepath.Join(dataDir, pkiDir)
	if name == GTR {
		name = gtrCertName
	}
	return tlsconf.Files{Cert: pki.CertFile(dir, name), Key: pki.KeyFile(dir, name), CA: filepath.Join(dir, pki.CAFile)}
}

// ClientTLS dials a cell or the issuer as name (see TLSFiles): a test
// that plays the GTR on a cell's stream dials as GTR, the checker as
// OpsCertName. The certificate is read once; it is not reloaded.
func (p *Platform) ClientTLS(name string) (grpc.DialOption, error) {
	return ClientTLS(p.cfg.DataDir, name)
}

// ClientTLS is Platform.ClientTLS for the platform on dataDir.
func ClientTLS(dataDir, name string) (grpc.DialOption, error) {
	creds, err := clientCreds(dataDir, name, "")
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(creds), nil
}

// ClientTLSTo is ClientTLS for dialling one peer: the server's
// certificate must carry identity peer (hop.Issuer, hop.Cell(id)), as
// the components pin theirs, so that another server of the same CA is
// refused in the handshake.
func ClientTLSTo(dataDir, name, peer string) (grpc.DialOption, error) {
	creds, err := clientCreds(dataDir, name, peer)
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(creds), nil
}

// clientCreds are name's credentials, pinned to identity peer unless it
// is empty.
func clientCreds(dataDir, name, peer string) (credentials.TransportCredentials, error) {
	f := TLSFiles(dataDir, name)
	cfg, err := tlsconf.ClientConfig(f.CA)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("platform: %s's certificate: %w", name, err)
	}
	cfg.Certificates = []tls.Certificate{cert}
	if peer != "" {
		cfg.VerifyConnection = hop.Pin(hop.Only(peer))
	}
	return credentials.NewTLS(cfg), nil
}

// PartnersFile is the partner registry the GTR starts from.
func (p *Platform) PartnersFile() string { return filepath.Join(p.cfg.DataDir, partnersFile) }

// PartnerKeyDir holds the sample partners' API key files.
func (p *Platform) PartnerKeyDir() string { return filepath.Join(p.cfg.DataDir, partnersDir) }

// PartnerKeys reads every sample partner's API key, by partner ID.
func (p *Platform) PartnerKeys() (map[string]string, error) {
	return partners.ReadKeyDir(p.PartnerKeyDir())
}

// GTRDialOptions connect to the GTR's partners' listener as the sample
// partners do: TLS trusting the development CA, and each call carrying the
// key of the partner its request names.
func (p *Platform) GTRDialOptions() ([]grpc.DialOption, error) {
	return PartnerDialOptions(p.CAFile(), p.PartnerKeyDir())
}

// PartnerDialOptions are GTRDialOptions for a platform's data folder laid
// out as above: TLS trusting caFile, and the keys of keyDir per partner.
func PartnerDialOptions(caFile, keyDir string) ([]grpc.DialOption, error) {
	tlsOpt, err := client.TLS(caFile)
	if err != nil {
		return nil, err
	}
	keys, err := partners.ReadKeyDir(keyDir)
	if err != nil {
		return nil, err
	}
	return []grpc.DialOption{tlsOpt, grpc.WithChainUnaryInterceptor(client.PartnerKeys(keys))}, nil
}

// gtrTLS is how the launcher checks the GTR's health: over TLS, trusting
// the development CA.
func (p *Platform) gtrTLS() (credentials.TransportCredentials, error) {
	cfg, err := tlsconf.ClientConfig(p.CAFile())
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// opsTLS are the tools' credentials (OpsCertName) for dialling peer, read
// once.
func (p *Platform) opsTLS(peer string) (credentials.TransportCredentials, error) {
	return clientCreds(p.cfg.DataDir, OpsCertName, peer)
}

// DemoTransaction is the sample request the launcher's "Try" lines send.
const DemoTransaction = `{"transaction_id":"demo-1","payment_type":"CARD_AUTHORIZATION","partner_id":"p-001","market":"GB","amount":{"minor_units":1250,"currency":"GBP"},"merchant":{"id":"m-1","mcc":"5411","country":"GB"},"card":{"pan":"4242424242424242","expiry_month":12,"expiry_year":2030}}`

// TryCommands are shell lines that submit DemoTransaction as partner p-001
// and read it back, over TLS with p-001's API key, with grpcurl (make build
// puts it in bin/). They are printed by the launcher and run as printed by
// the tests; paths are relative to dir when they are inside it.
func (p *Platform) TryCommands(grpcurl, dir string) []string {
	rel := func(path string) string {
		if r, err := filepath.Rel(dir, path); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return path
	}
	common := fmt.Sprintf("%s -cacert %s -H \"authorization: Bearer $(cat %s)\"", rel(grpcurl), rel(p.CAFile()), rel(partners.KeyFile(p.PartnerKeyDir(), "p-001")))
	return []string{
		fmt.Sprintf("%s -d '%s' %s cellpay.v1.Payments/SubmitTransaction", common, DemoTransaction, p.cfg.GTRAddr),
		fmt.Sprintf("%s -d '{\"transaction_id\":\"demo-1\"}' %s cellpay.v1.Payments/GetTransaction", common, p.cfg.GTRAddr),
	}
}
