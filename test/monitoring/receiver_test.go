package monitoring

import (
	"context"
	"net"
	"sync"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// receiver is an OTLP gRPC trace receiver in the test's process: it keeps
// every span the platform's processes export, with its service's name.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr string
	srv  *grpc.Server

	mu    sync.Mutex
	spans []span
}

// span is one received span and the service.name of its resource.
type span struct {
	service string
	*tracepb.Span
}

func startReceiver() (*receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{addr: l.Addr().String(), srv: grpc.NewServer()}
	collectortrace.RegisterTraceServiceServer(r.srv, r)
	go r.srv.Serve(l)
	return r, nil
}

func (r *receiver) stop() { r.srv.Stop() }

// Export keeps the request's spans.
func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, span{service, s})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// all returns every span received so far.
func (r *receiver) all() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]span(nil), r.spans...)
}
