package servingcert

import (
	"time"

	"github.com/ipledger/ipledger/pkg/backoff"
)

// RenewAt is when a certificate received at issued and valid until
// notAfter is renewed: two thirds of the way, so that a signer that is down
// for a third of the lifetime (20 days for DefaultValidity)
// stops nothing. It counts from receipt, not from NotBefore, which signers
// backdate for clock skew.
func RenewAt(issued, notAfter time.Time) time.Time {
	return issued.Add(notAfter.Sub(issued) * 2 / 3)
}

// retry is the wait between failed requests: one second, doubling, at most
// a minute.
var retry = backoff.Policy{First: time.Second, Max: time.Minute}

// Backoff is the wait after the failures-th failed request in a row.
func Backoff(failures int) time.Duration { return retry.Delay(failures) }
