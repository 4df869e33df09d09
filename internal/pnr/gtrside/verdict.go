package gtrside

import "github.com/cellpay/cellpay/pkg/api/cellpayv1"

// Health is what an attempt tells its cell's health (the GTR's monitor,
// which ejects a cell that fails).
type Health uint8

const (
	// Answered: the cell answered; a sign of life.
	Answered Health = iota
	// Failed: the cell failed the attempt itself (unreachable, broken, a
	// fault of its own).
	Failed
	// TimedOut: neither a failure nor a sign of life. A slow cell is its
	// adaptive limit's business; a frozen or dead one is found by the
	// active health checks, which it no longer answers.
	TimedOut
)

// Sample is what a call or an attempt tells an adaptive concurrency limit
// as it gives its slot back.
type Sample uint8

const (
	// SampleServed: a latency that measures the load.
	SampleServed Sample = iota
	// SampleDropped: the work failed or timed out: the limit shrinks.
	SampleDropped
	// SampleIgnored: says nothing of the load (the answer was about the
	// request, or the caller left).
	SampleIgnored
	// SampleNone: there is no slot to give back.
	SampleNone
)

// Health is what the attempt tells its cell's health. A caller who left
// says nothing of the cell (a partner that cancels its calls must not get
// a cell ejected for every other partner): TimedOut.
func (a Answer) Health() Health {
	switch {
	case a.Reroute != nil && (a.Slow || a.Gone):
		return TimedOut
	case a.Reroute != nil && !a.CellHealthy:
		return Failed
	}
	return Answered
}

// Sample is what an attempt that did not give its slot back at the point
// of no return (Released) tells the cell's limit: a cell that failed or
// was slow is a dropped sample; an answer about the request, a PENDING or
// a caller who left says nothing of the cell's load.
func (a Answer) Sample() Sample {
	switch {
	case a.Gone:
		return SampleIgnored
	case a.Reroute != nil && (!a.CellHealthy || a.Slow):
		return SampleDropped
	case a.Reroute != nil, a.Final != nil, a.Pending,
		a.Txn.GetStatus() == cellpayv1.TransactionStatus_PENDING:
		return SampleIgnored
	}
	return SampleServed
}
