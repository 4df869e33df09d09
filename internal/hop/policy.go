package hop

import (
	"fmt"

	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/issuerproto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Services every server opens: health to any verified caller (the GTR's
// monitor, probes, the launcher), reflection to operators' tools.
var common = Policy{
	{Prefix: "/grpc.health.v1.Health/", Allow: Anyone},
	{Prefix: "/grpc.reflection.", Allow: Only(Ops)},
}

// CellPolicy: a cell serves its Cell API (Process, Get, ListCallbacks,
// ReplayCallbacks) to the GTR only. Anyone else who reaches a cell's port
// could otherwise use it as a card-testing oracle.
var CellPolicy = append(Policy{
	{Prefix: "/" + cellproto.Cell_ServiceDesc.ServiceName + "/", Allow: Only(GTR)},
}, common...)

// IssuerPolicy: the issuer authorizes and answers inquiries for cells
// only; its record of effects (ListEffects) for cells (the issuer keeps
// each to its own terminal) and operators; its test counters (Effects) and
// fault injection (SetFaults) are for operators' and tests' tools (the
// checker), never a cell or the GTR.
var IssuerPolicy = append(Policy{
	{Prefix: issuerproto.Issuer_Authorize_FullMethodName, Allow: IsCell},
	{Prefix: issuerproto.Issuer_Inquire_FullMethodName, Allow: IsCell},
	{Prefix: issuerproto.Issuer_Adjust_FullMethodName, Allow: IsCell},
	{Prefix: issuerproto.Issuer_ListEffects_FullMethodName, Allow: func(id string) bool { return IsCell(id) || id == Ops }},
	{Prefix: issuerproto.Issuer_Effects_FullMethodName, Allow: Only(Ops)},
	{Prefix: issuerproto.Issuer_SetFaults_FullMethodName, Allow: Only(Ops)},
}, common...)

// InsecurePlaintextFlag is the flag every component takes to run its hops
// without TLS files; without it, no TLS files refuse the start
// (RequireTLS).
const InsecurePlaintextFlag = "-insecure-plaintext"

// RequireTLS is a component's start-up check of its hop TLS files: with
// any of them set it is nil (pki checks they are complete); with none, an
// error naming tlsFlags unless insecure (-insecure-plaintext) chose
// plaintext explicitly. Plaintext serves every caller and checks no
// identity, so it is never what a component falls into by leaving a flag
// out.
func RequireTLS(files tlsconf.Files, insecure bool, tlsFlags string) error {
	if files.Set() || insecure {
		return nil
	}
	return fmt.Errorf("no TLS files: give %s, or %s to run plaintext with no authorization (anyone may call; benchmarks and local tests only)", tlsFlags, InsecurePlaintextFlag)
}

// RequireNATSTLS is RequireTLS for a component's NATS connection: with a
// NATS URL, the CA of NATS's certificate (caFlag names its flag) is needed
// to speak TLS and be authenticated, unless insecure is set (anonymous
// plaintext NATS, which a locked-down server refuses).
func RequireNATSTLS(url, ca string, insecure bool, caFlag string) error {
	if url == "" || ca != "" || insecure {
		return nil
	}
	return fmt.Errorf("a NATS URL without %s: give it to speak TLS to NATS as this component's identity, or %s for anonymous plaintext NATS (local tests only)", caFlag, InsecurePlaintextFlag)
}

// ServerOptions serve mutual TLS with files and enforce p; with no files
// they are none (plaintext, every caller allowed), which a component
// reaches only through an explicit -insecure-plaintext (RequireTLS). The
// func stops the certificate's reloading.
func ServerOptions(files tlsconf.Files, p Policy) ([]grpc.ServerOption, func(), error) {
	if !files.Set() {
		return nil, func() {}, nil
	}
	cfg, stop, err := tlsconf.MutualServerConfig(files, 0)
	if err != nil {
		return nil, nil, err
	}
	return append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, p.ServerOptions()...), stop, nil
}
