package plan

import (
	"fmt"

	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// ToConfirm splits the Services a pass finds absent from the stream into
// those to ask the API server about before their addresses are given back
// (holds: they hold an address or a ledger entry; the stream may lag a
// Service created a moment ago) and those holding nothing, whose
// bookkeeping is simply dropped.
func ToConfirm(absent []string, holds func(key string) bool) (ask, nothing []string) {
	for _, key := range absent {
		if holds(key) {
			ask = append(ask, key)
		} else {
			nothing = append(nothing, key)
		}
	}
	return ask, nothing
}

// Absence is what the API server answered for a Service the stream does
// not show.
type Absence struct {
	Key string
	// Gone: it answered NotFound, or the Service is being deleted
	// (quorum.Answer.Gone).
	Gone bool
	// Err is why it could not answer.
	Err error
}

// GonePlan is what to do with the absent Services asked about.
type GonePlan struct {
	// Gone are confirmed gone: their addresses are released.
	Gone []string
	// Failed could not be confirmed: tried again after a failure's backoff.
	Failed []Absence
	// Shown are still shown by the API server (the stream lags): tried
	// again later.
	Shown []string
}

// ConfirmGone decides from the API server's answers which absent Services
// are gone.
func ConfirmGone(answers []Absence) GonePlan {
	var p GonePlan
	for _, a := range answers {
		switch {
		case a.Gone && a.Err == nil:
			p.Gone = append(p.Gone, a.Key)
		case a.Err != nil:
			p.Failed = append(p.Failed, a)
		default:
			p.Shown = append(p.Shown, a.Key)
		}
	}
	return p
}

// SuspectCheck is what the API server shows of a Suspect: whether the
// Service whose status shows the address (Suspect.Shows) still shows it,
// whether the entry's own Service does, and why it could not tell.
type SuspectCheck struct {
	Suspect
	ShowerShows, HolderShows bool
	Err                      error
}

// Overruling is a ledger entry not obeyed, and the Event that says why.
type Overruling struct {
	Suspect
	Message string
}

// OverrulePlan is what the checks of a rebuild's Suspects decide.
type OverrulePlan struct {
	// Overrule are the entries to leave out of the next rebuild.
	Overrule []Overruling
	// Unchecked could not be checked now: their entries are obeyed.
	Unchecked []SuspectCheck
}

// Overrule decides which suspect ledger entries are overruled: those
// whose address the Service its status shows it on still shows, while the
// entry's own Service does not (or is gone). The stream may lag the
// ledger; the API server, which the checks asked, does not. An entry that
// could not be checked is obeyed.
func Overrule(checks []SuspectCheck) OverrulePlan {
	var p OverrulePlan
	for _, c := range checks {
		switch {
		case c.Err != nil:
			p.Unchecked = append(p.Unchecked, c)
		case !c.ShowerShows || c.HolderShows:
		default:
			p.Overrule = append(p.Overrule, Overruling{Suspect: c.Suspect, Message: fmt.Sprintf(
				"The ledger gives %s to Service %s, whose status does not show it, while Service %s shows it: "+
					"ipam never writes such a ledger (it was edited outside ipam), so the status wins and the entry is released",
				c.Entry.IP, c.Entry.Service.Key(), c.Shows)})
		}
	}
	return p
}

// Entries are the overruled ledger entries.
func (p OverrulePlan) Entries() []ledger.Allocation {
	var out []ledger.Allocation
	for _, o := range p.Overrule {
		out = append(out, o.Entry)
	}
	return out
}
