package plan

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// TestToConfirm: only a Service that holds something is asked about.
func TestToConfirm(t *testing.T) {
	holds := map[string]bool{"a/holds": true, "a/recorded": true}
	ask, nothing := ToConfirm([]string{"a/holds", "a/none", "a/recorded", "a/other"}, func(k string) bool { return holds[k] })
	if fmt.Sprint(ask) != "[a/holds a/recorded]" || fmt.Sprint(nothing) != "[a/none a/other]" {
		t.Fatalf("ToConfirm = %v, %v", ask, nothing)
	}
}

// TestConfirmGone: released only on the API server's word; a failure and a
// Service it still shows are tried again, differently.
func TestConfirmGone(t *testing.T) {
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name    string
		answers []Absence
		want    string
	}{
		{"none", nil, "gone=[] failed=[] shown=[]"},
		{"gone", []Absence{{Key: "a/x", Gone: true}}, "gone=[a/x] failed=[] shown=[]"},
		{"still shown: the stream lags", []Absence{{Key: "a/x"}}, "gone=[] failed=[] shown=[a/x]"},
		{"no answer", []Absence{{Key: "a/x", Err: down}}, "gone=[] failed=[a/x] shown=[]"},
		{"an error is never gone", []Absence{{Key: "a/x", Gone: true, Err: down}}, "gone=[] failed=[a/x] shown=[]"},
		{"mixed, in order", []Absence{{Key: "a/1", Gone: true}, {Key: "a/2"}, {Key: "a/3", Err: down}, {Key: "a/4", Gone: true}},
			"gone=[a/1 a/4] failed=[a/3] shown=[a/2]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ConfirmGone(tc.answers)
			var failed []string
			for _, f := range p.Failed {
				failed = append(failed, f.Key)
			}
			if got := fmt.Sprintf("gone=%v failed=%v shown=%v", p.Gone, failed, p.Shown); got != tc.want {
				t.Fatalf("ConfirmGone = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestOverrule: an entry is overruled only when the API server confirms
// both sides; one it cannot check is obeyed.
func TestOverrule(t *testing.T) {
	s := Suspect{Entry: ledger.Allocation{IP: netip.MustParseAddr("10.0.0.1"), Service: ledger.ServiceRef{Namespace: "a", Name: "ledger"}}, Shows: "a/status"}
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name                     string
		showerShows, holderShows bool
		err                      error
		want                     string
	}{
		{"the shower shows it, the holder does not: overruled", true, false, nil, "overrule"},
		{"the shower no longer shows it: obeyed", false, false, nil, ""},
		{"the holder shows it too: obeyed", true, true, nil, ""},
		{"neither: obeyed", false, true, nil, ""},
		{"cannot check: obeyed", true, false, down, "unchecked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Overrule([]SuspectCheck{{Suspect: s, ShowerShows: tc.showerShows, HolderShows: tc.holderShows, Err: tc.err}})
			got := ""
			switch {
			case len(p.Overrule) == 1 && len(p.Unchecked) == 0 && len(p.Entries()) == 1 && p.Entries()[0] == s.Entry:
				got = "overrule"
				if m := p.Overrule[0].Message; !strings.Contains(m, "gives 10.0.0.1 to Service a/ledger") || !strings.Contains(m, "while Service a/status shows it") {
					t.Fatalf("message %q does not name the address and both Services", m)
				}
			case len(p.Overrule) == 0 && len(p.Unchecked) == 1:
				got = "unchecked"
			case len(p.Overrule) != 0 || len(p.Unchecked) != 0:
				got = fmt.Sprintf("%+v", p)
			}
			if got != tc.want {
				t.Fatalf("Overrule = %q, want %q", got, tc.want)
			}
		})
	}
}
