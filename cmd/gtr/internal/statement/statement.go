// Package statement is a partner's daily statement as the GTR sums it from
// its cells' (cellpay.v1.Payments.GetStatement for partners, the Admin
// API's GetStatement for operators): the one way both sum, so that they
// agree.
package statement

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// ErrDate: a statement's date is not a day written YYYY-MM-DD.
var ErrDate = errors.New("want a UTC day, YYYY-MM-DD")

// Day is the UTC day date names, [start, end).
func Day(date string) (start, end time.Time, err error) {
	day, err := time.Parse(time.DateOnly, date)
	if err != nil {
		return start, end, ErrDate
	}
	return day, day.Add(24 * time.Hour), nil
}

// key is what a statement sums by.
type key struct {
	pt       cellpayv1.PaymentType
	st       cellpayv1.TransactionStatus
	currency string
}

// Sum sums lines into one line per payment type, status and currency, in
// that order. The lines given are not changed.
func Sum(lines []*cellpayv1.StatementLine) []*cellpayv1.StatementLine {
	sums := map[key]*cellpayv1.StatementLine{}
	for _, l := range lines {
		k := key{l.GetPaymentType(), l.GetStatus(), l.GetCurrency()}
		sum := sums[k]
		if sum == nil {
			sum = &cellpayv1.StatementLine{PaymentType: k.pt, Status: k.st, Currency: k.currency}
			sums[k] = sum
		}
		sum.Count += l.GetCount()
		sum.AmountMinorUnits += l.GetAmountMinorUnits()
	}
	out := make([]*cellpayv1.StatementLine, 0, len(sums))
	for _, l := range sums {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *cellpayv1.StatementLine) int {
		return cmp.Or(cmp.Compare(a.GetPaymentType(), b.GetPaymentType()), cmp.Compare(a.GetStatus(), b.GetStatus()),
			cmp.Compare(a.GetCurrency(), b.GetCurrency()))
	})
	return out
}
