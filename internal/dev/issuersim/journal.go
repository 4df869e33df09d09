package issuersim

import (
	"context"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// journal is every outcome the issuer applied, in the order it recorded
// them: the issuer's own record of its effects, which ListEffects pages
// through. Its lock is a leaf lock. It grows with the ledger, which keeps
// every transaction too.
type journal struct {
	mu      sync.Mutex
	entries []journalEntry
}

type journalEntry struct {
	k txnKey
	o outcome
}

func (j *journal) add(k txnKey, o outcome) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, journalEntry{k, o})
}

// Bounds of ListEffects.
const (
	defEffectsPage    = 500
	maxEffectsPage    = 1000
	maxEffectsWindow  = 31 * 24 * time.Hour
	effectsTokenRadix = 36
)

// ListEffects pages through the outcomes applied in [from, to) of the
// issuer's clock, of requests that carried terminal_id when one is asked,
// in the order they were recorded. Its page token is the place in the
// journal to go on from. The simulator has one acquirer: every caller
// that passed mutual TLS is it; a cell (by its certificate) may list only
// its own terminal's effects.
func (s *Server) ListEffects(ctx context.Context, req *issuerproto.ListEffectsRequest) (*issuerproto.ListEffectsResponse, error) {
	from, to := req.GetFrom(), req.GetTo()
	size := int(req.GetPageSize())
	if cell := hop.CellID(hop.Identity(ctx)); cell != "" && req.GetTerminalId() != cell {
		return nil, status.Error(codes.PermissionDenied, "issuersim: terminal_id: a cell may list only its own terminal's effects")
	}
	switch {
	case from == nil || from.CheckValid() != nil:
		return nil, invalidArg("from is required, a valid time")
	case to == nil || to.CheckValid() != nil:
		return nil, invalidArg("to is required, a valid time")
	case !to.AsTime().After(from.AsTime()):
		return nil, invalidArg("to must be after from")
	case to.AsTime().Sub(from.AsTime()) > maxEffectsWindow:
		return nil, invalidArg("from and to may be at most 31 days apart")
	case size < 0 || size > maxEffectsPage:
		return nil, invalidArg("page_size must be 0 (500) to 1000")
	case size == 0:
		size = defEffectsPage
	}
	s.journal.mu.Lock()
	n := len(s.journal.entries)
	s.journal.mu.Unlock()
	start := 0
	if t := req.GetPageToken(); t != "" {
		i, err := strconv.ParseInt(t, effectsTokenRadix, 64)
		if err != nil || i < 0 || i > int64(n) {
			return nil, invalidArg("page_token is not one this issuer gave")
		}
		start = int(i)
	}
	lo, hi, term := from.AsTime(), to.AsTime(), req.GetTerminalId()
	resp := &issuerproto.ListEffectsResponse{}
	// The first n entries are never written again (an append writes past
	// them, or copies them), so they are read without the lock.
	s.journal.mu.Lock()
	entries := s.journal.entries[start:n:n]
	s.journal.mu.Unlock()
	for i, e := range entries {
		if len(resp.Effects) == size {
			resp.NextPageToken = strconv.FormatInt(int64(start+i), effectsTokenRadix)
			break
		}
		o := e.o
		if o.at.Before(lo) || !o.at.Before(hi) || term != "" && o.terminal != term {
			continue
		}
		resp.Effects = append(resp.Effects, &issuerproto.RecordedEffect{
			PartnerId: e.k.partner, TransactionId: e.k.id,
			Kind: o.kind, OriginalTransactionId: o.original, Refund: o.refund, BankTransfer: o.bankTransfer,
			Approved: o.approved, AuthCode: o.authCode, DeclineReason: o.reason,
			AmountMinorUnits: o.amount, Currency: o.currency,
			AppliedAt: timestamppb.New(o.at), TerminalId: o.terminal,
			RequestedAmountMinorUnits: o.requested, RequestedCurrency: o.requestedCurrency,
		})
	}
	return resp, nil
}
