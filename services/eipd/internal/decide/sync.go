package decide

import "slices"

// A sync of one Node decides in two steps, because each needs what EC2
// answers to the step before: Triage, from the Node and the addresses
// alone, says whether to give back, wait, confirm, or look up the Node's
// instance; once the instance is admitted (Admit) and the addresses held
// outside the cluster set aside (HeldOutside), Assign says what the Node
// gets. The controller gathers the inputs of each step, calls it, and
// carries out what it returns.

// NodeFacts are what Triage looks at: one Node as the sync sees it (from the
// view, or just read from the API server) and EC2's addresses.
type NodeFacts struct {
	Node string
	// OptIn is the Node's opt-in: NoOptIn when it is gone or being deleted.
	OptIn OptIn
	// Published: the Node carries an address in its label or annotation.
	Published bool
	// ProviderID is the Node's spec.providerID.
	ProviderID string
	// Tagged counts the addresses tagged for the Node.
	Tagged int
	// Waiting: an allocation for the Node had no answer, and EC2 does not
	// list its outcome yet (package expect).
	Waiting bool
	// Confirmed: the Node was just read from the API server, not from the
	// watcher's view.
	Confirmed bool
}

// Next is what a sync does with a Node after Triage.
type Next int

const (
	// NextGiveBack: the Node wants no address; give back every address
	// tagged for it and clear what it publishes.
	NextGiveBack Next = iota + 1
	// NextConfirm: giving back would destroy something on the view's word;
	// read the live Node and decide again from it.
	NextConfirm
	// NextAwaitEC2: an allocation had no answer; allocating again now is
	// how duplicates are born, so the Node is looked at again shortly.
	NextAwaitEC2
	// NextAwaitProviderID: the cloud controller has not set the Node's
	// spec.providerID yet (that update requeues the Node).
	NextAwaitProviderID
	// NextInvalidProviderID: spec.providerID names no EC2 instance.
	NextInvalidProviderID
	// NextLookUp: describe the Node's instance (Triaged.InstanceID) and
	// admit it.
	NextLookUp
)

func (n Next) String() string {
	return [...]string{"Next(0)", "GiveBack", "Confirm", "AwaitEC2", "AwaitProviderID", "InvalidProviderID", "LookUp"}[n]
}

// Triaged is what Triage decided.
type Triaged struct {
	Next Next
	// InstanceID is the instance to look up (NextLookUp).
	InstanceID string
	// WarnLegacy: the Node opts in only through the deprecated label
	// (NextLookUp).
	WarnLegacy bool
	// Reason is the Node's status message when it waits, or why its
	// providerID is invalid.
	Reason string
}

// Triage decides what a sync does first with a Node. A Node that wants no
// address gives back, but never on the view's word alone when that would
// destroy something (Intent.Destroys): then it is confirmed first. A Node
// that wants one waits for an unanswered allocation to show up, then for
// its providerID; otherwise its instance is looked up.
func Triage(n NodeFacts) Triaged {
	if n.OptIn == NoOptIn {
		if (Intent{GiveBack: true, Tagged: n.Tagged, Published: n.Published}).Destroys() && !n.Confirmed {
			return Triaged{Next: NextConfirm}
		}
		return Triaged{Next: NextGiveBack}
	}
	switch {
	case n.Waiting:
		return Triaged{Next: NextAwaitEC2, Reason: "waiting for EC2 to list an address whose allocation had no answer"}
	case n.ProviderID == "":
		return Triaged{Next: NextAwaitProviderID, Reason: "waiting for spec.providerID"}
	}
	id, err := InstanceID(n.ProviderID)
	if err != nil {
		return Triaged{Next: NextInvalidProviderID, Reason: err.Error()}
	}
	return Triaged{Next: NextLookUp, InstanceID: id, WarnLegacy: n.OptIn == LegacyOptIn}
}

// Step is what a sync does with an admitted Node, decided by Assign.
type Step int

const (
	// Cordoned: the Node is being drained and has no address: it takes
	// none (Assignment.Reason).
	Cordoned Step = iota + 1
	// Waits: nothing the Node may take is free (Assignment.Reason).
	Waits
	// ConfirmDuplicates: the plan releases duplicates, and which one stays
	// depends on the Node's annotation, which the view may show old: read
	// the live Node and decide again from it.
	ConfirmDuplicates
	// Carry: carry out the plan.
	Carry
)

func (s Step) String() string {
	return [...]string{"Step(0)", "Cordoned", "Waits", "ConfirmDuplicates", "Carry"}[s]
}

// Assignment is what Assign decided.
type Assignment struct {
	Step Step
	// Plan is Choose's (not set for Cordoned).
	Plan Plan
	// Target is where the Node's address goes (Input.Target).
	Target Target
	// Seen: EC2 listed the address the Node keeps associated with its
	// target before the sync did anything, not only because eipd just asked
	// for it (the startup taint may go).
	Seen bool
	// Reason is the Node's status message when it takes nothing.
	Reason string
}

// Assign decides what an admitted Node gets. A cordoned Node (being drained:
// a spot interruption, a scale-in) must not take a scarce address; one it
// already has, it keeps. Otherwise Choose decides, and duplicates are
// released only once confirmed against the live Node.
func Assign(in Input, cordoned, confirmed bool) Assignment {
	if cordoned && !slices.ContainsFunc(in.Addresses, func(a Address) bool { return a.Node == in.Node }) {
		return Assignment{Step: Cordoned, Target: in.Target, Reason: "cordoned (spec.unschedulable): a Node being drained takes no new Elastic IP; uncordon it to get one"}
	}
	p := Choose(in)
	switch {
	case p.Action == Wait:
		return Assignment{Step: Waits, Plan: p, Target: in.Target, Reason: p.Reason}
	case (Intent{Duplicates: len(p.Release)}).Destroys() && !confirmed:
		return Assignment{Step: ConfirmDuplicates, Plan: p, Target: in.Target}
	}
	return Assignment{Step: Carry, Plan: p, Target: in.Target, Seen: p.Action == UseTagged && p.Address.AssociatedWith(in.Target)}
}
