package monitoring

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestTraceAcrossProcesses: a transaction submitted under a client span of
// the test's own (W3C traceparent) is one trace whose spans come from the
// GTR, the cell that took it and the issuer simulator, each process's
// spans the children of the one before, its root the GTR's server span
// linked to the partner's span (a public endpoint links a partner's trace
// rather than continue it); and no span received, of any trace, holds the
// card number, the partner's API key, a card verification field or the
// amount.
func TestTraceAcrossProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts, err := env.p.GTRDialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(env.gtrAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	keys, err := env.p.PartnerKeys()
	if err != nil {
		t.Fatal(err)
	}
	const partner = "p-001"
	if keys[partner] == "" {
		t.Fatalf("no API key for %s", partner)
	}

	// The partner's own span; sampled, never exported (only its context
	// travels).
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	sctx, client := tp.Tracer("cellpay/test/monitoring").Start(ctx, "partner SubmitTransaction", trace.WithSpanKind(trace.SpanKindClient))
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(sctx, carrier)
	if carrier.Get("traceparent") == "" {
		t.Fatal("no traceparent from the client span")
	}
	sctx = metadata.AppendToOutgoingContext(sctx, "traceparent", carrier.Get("traceparent"))

	body := fmt.Sprintf("4921%011d", time.Now().UnixNano()%100_000_000_000)
	pan := body + string(card.CheckDigit(body))
	const amount = 7319
	req := &cellpayv1.SubmitTransactionRequest{
		TransactionId: fmt.Sprintf("trace-%d", time.Now().UnixNano()),
		PaymentType:   cellpayv1.PaymentType_CARD_AUTHORIZATION,
		PartnerId:     partner,
		Market:        "GB",
		Amount:        &cellpayv1.Money{MinorUnits: amount, Currency: "GBP"},
		Merchant:      &cellpayv1.Merchant{Id: "m-trace", Mcc: "5411", Country: "GB"},
		Card:          &cellpayv1.Card{Pan: pan, ExpiryMonth: 12, ExpiryYear: 2030},
	}
	var hdr metadata.MD
	txn, err := cellpayv1.NewPaymentsClient(conn).SubmitTransaction(sctx, req, grpc.Header(&hdr))
	client.End()
	if err != nil {
		t.Fatalf("SubmitTransaction: %v", err)
	}
	clientTrace, clientID := client.SpanContext().TraceID(), client.SpanContext().SpanID()

	// The GTR faces partners: it links their trace context rather than
	// continue it (telemetry.PublicServerOptions), so the transaction's
	// trace is the one whose root, the GTR's server span, links to the
	// client span. Its processes' spans arrive within the batch
	// processor's delay (100 ms here) of their end.
	var root span
	var spans map[string]span
	find := func() bool {
		for _, s := range env.traces.all() {
			for _, l := range s.Links {
				if bytes.Equal(l.TraceId, clientTrace[:]) && bytes.Equal(l.SpanId, clientID[:]) {
					root = s
				}
			}
		}
		if root.Span == nil {
			return false
		}
		spans = map[string]span{}
		for _, s := range env.traces.all() {
			if bytes.Equal(s.TraceId, root.TraceId) {
				spans[hex.EncodeToString(s.SpanId)] = s
			}
		}
		return true
	}
	// parentService is the service of s's parent: "root" for none, ""
	// if the parent is not in the trace.
	parentService := func(s span) string {
		if len(s.ParentSpanId) == 0 {
			return "root"
		}
		return spans[hex.EncodeToString(s.ParentSpanId)].service
	}
	// The chain: the GTR's root (linked to the test's span) → the cell →
	// the issuer.
	chain := func() bool {
		if !find() {
			return false
		}
		links := map[string]bool{}
		for _, s := range spans {
			links[parentService(s)+">"+s.service] = true
		}
		return links["root>gtr"] && links["gtr>cell"] && links["cell>issuersim"]
	}
	if !testutil.Within(15*time.Second, chain) {
		var got []string
		for _, s := range spans {
			got = append(got, fmt.Sprintf("%s %q (parent %s)", s.service, s.Name, parentService(s)))
		}
		t.Fatalf("not within 15 s: one trace from the GTR's span linked to the client span through the cell and the issuer; found root %v, spans: %s; %d spans received in all",
			root.Span != nil, strings.Join(got, "; "), len(env.traces.all()))
	}
	if root.service != "gtr" || len(root.ParentSpanId) != 0 || root.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("the span linked to the client span: %s %q kind %v parent %x, want the GTR's server span, a root", root.service, root.Name, root.Kind, root.ParentSpanId)
	}
	// The request ID the partner got is on the GTR's span, for support.
	reqID := ""
	if v := hdr.Get(apierr.HeaderRequestID); len(v) == 1 {
		reqID = v[0]
	}
	onSpan := ""
	for _, kv := range root.Attributes {
		if kv.GetKey() == apierr.SpanAttribute {
			onSpan = kv.GetValue().GetStringValue()
		}
	}
	if reqID == "" || onSpan != reqID {
		t.Errorf("request ID %q in the answer's header, %q on the GTR's span", reqID, onSpan)
	}
	roots := 0
	for id, s := range spans {
		switch parentService(s) {
		case "":
			t.Errorf("span %s %q of %s: parent %x is not in the trace", id, s.Name, s.service, s.ParentSpanId)
		case "root":
			roots++
		}
	}
	if roots != 1 {
		t.Errorf("%d roots in the trace, want 1 (the GTR's server span)", roots)
	}
	traceID := hex.EncodeToString(root.TraceId)
	services := map[string]int{}
	for _, s := range spans {
		services[s.service]++
	}
	t.Logf("transaction %s on %s: trace %s, %d spans by service %v", req.TransactionId, txn.GetCellId(), traceID, len(spans), services)

	// Nothing of the payload in any span received (every trace so far).
	forbidden := []string{pan, groups(pan), keys[partner], fmt.Sprint(amount)}
	scanned := ""
	for _, s := range env.traces.all() {
		for _, text := range spanText(s) {
			scanned += text + "\n"
			// The request ID is 16 random hex digits, which hold any
			// 4-digit amount now and then (make test saw it): it must be
			// that token and nothing else, and is not scanned further.
			if id, ok := strings.CutPrefix(text, apierr.SpanAttribute+"="); ok {
				if _, err := hex.DecodeString(id); err != nil || len(id) != 16 {
					t.Errorf("%s span %q: request ID %q is not 16 hex digits", s.service, s.Name, redact(id))
				}
				continue
			}
			// So is the reference an answer's message quotes (an
			// UNAVAILABLE's, retried): that token, not scanned.
			text = referenceToken.ReplaceAllString(text, "(reference)")
			low := strings.ToLower(text)
			for _, f := range forbidden {
				if strings.Contains(text, f) {
					t.Errorf("%s span %q holds %q: %q", s.service, s.Name, redact(f), redact(text))
				}
			}
			for _, word := range []string{"cvv", "cvc", "card_verification", "minor_units", "minorunits", "expiry", "body", "payload"} {
				if strings.Contains(low, word) {
					t.Errorf("%s span %q has a payload-like field %q: %q", s.service, s.Name, word, redact(text))
				}
			}
		}
	}
	// The scan saw what spans carry: the methods' names and attributes.
	if !strings.Contains(scanned, "SubmitTransaction") || !strings.Contains(scanned, "rpc.method=") {
		t.Errorf("the scanned span text lacks the RPC names and attributes:\n%s", scanned)
	}
}

// spanText is every string a span carries besides its IDs and times: its
// name, status message and the keys and values of its attributes, its
// events' and its links'.
// referenceToken is the request ID as an answer's message quotes it.
var referenceToken = regexp.MustCompile(`\(reference [0-9a-f]{16}\)`)

func spanText(s span) []string {
	out := []string{s.Name, s.GetStatus().GetMessage()}
	attrs := func(kvs []*commonpb.KeyValue) {
		for _, kv := range kvs {
			out = append(out, kv.GetKey()+"="+anyText(kv.GetValue()))
		}
	}
	attrs(s.Attributes)
	for _, e := range s.Events {
		out = append(out, e.GetName())
		attrs(e.GetAttributes())
	}
	for _, l := range s.Links {
		attrs(l.GetAttributes())
	}
	return out
}

func anyText(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_BytesValue:
		return string(x.BytesValue)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, anyText(e))
		}
		return strings.Join(parts, ",")
	case *commonpb.AnyValue_KvlistValue:
		var parts []string
		for _, kv := range x.KvlistValue.GetValues() {
			parts = append(parts, kv.GetKey()+"="+anyText(kv.GetValue()))
		}
		return strings.Join(parts, ",")
	}
	return ""
}

// groups writes a card number in fours, as a form would.
func groups(pan string) string {
	var b strings.Builder
	for i, r := range pan {
		if i > 0 && i%4 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// redact keeps a failure message from printing what it found.
func redact(s string) string {
	if len(s) <= 4 {
		return "****"
	}
	return s[:2] + strings.Repeat("*", len(s)-4) + s[len(s)-2:]
}
