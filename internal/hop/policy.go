package hop

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/internal/pki"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/issuerproto"
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
// only; its test counters (Effects) and fault injection (SetFaults) are
// for operators' and tests' tools (the checker), never a cell or the GTR.
var IssuerPolicy = append(Policy{
	{Prefix: issuerproto.Issuer_Authorize_FullMethodName, Allow: IsCell},
	{Prefix: issuerproto.Issuer_Inquire_FullMethodName, Allow: IsCell},
	{Prefix: issuerproto.Issuer_Effects_FullMethodName, Allow: Only(Ops)},
	{Prefix: issuerproto.Issuer_SetFaults_FullMethodName, Allow: Only(Ops)},
}, common...)

// ServerOptions serve mutual TLS with files and enforce p; with no files
// they are none (plaintext, every caller allowed: benchmarks and a lone
// cell only). The func stops the certificate's reloading.
func ServerOptions(files pki.Files, p Policy) ([]grpc.ServerOption, func(), error) {
	if !files.Set() {
		return nil, func() {}, nil
	}
	cfg, stop, err := pki.MutualServerConfig(files, 0)
	if err != nil {
		return nil, nil, err
	}
	return append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, p.ServerOptions()...), stop, nil
}

// DialOption dials with mutual TLS as files' identity, or plaintext with
// no files. The func stops the certificate's reloading.
func DialOption(files pki.Files) (grpc.DialOption, func(), error) {
	if !files.Set() {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), func() {}, nil
	}
	cfg, stop, err := pki.MutualClientConfig(files, 0)
	if err != nil {
		return nil, nil, err
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), stop, nil
}
