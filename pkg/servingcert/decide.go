package servingcert

import "time"

// RenewAt is when a certificate received at issued and valid until
// notAfter is renewed: two thirds of the way, so that a signer that is down
// for a third of the lifetime (20 days for DefaultValidity)
// stops nothing. It counts from receipt, not from NotBefore, which signers
// backdate for clock skew.
func RenewAt(issued, notAfter time.Time) time.Time {
	return issued.Add(notAfter.Sub(issued) * 2 / 3)
}

// maxBackoff bounds the wait between failed requests.
const maxBackoff = time.Minute

// Backoff is the wait after the failures-th failed request in a row: one
// second, doubling, at most maxBackoff.
func Backoff(failures int) time.Duration {
	if failures < 1 {
		return 0
	}
	if failures > 7 {
		return maxBackoff
	}
	return min(time.Second<<(failures-1), maxBackoff)
}
