// Package readiness decides an ExternalWorkload's Ready condition from the
// results of its readiness probe: how the results of the workload's
// addresses combine, the thresholds state machine (a Pod's readiness probe
// semantics), when the condition must be written and what it then says. It
// is plain Go: no clients, no clocks, no network; package prober runs the
// probes and sends the writes.
package readiness

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

const (
	// ConditionReady is the condition the probe owns.
	ConditionReady = "Ready"
	// ReasonProbeSucceeded and ReasonProbeFailed are the reasons of a Ready
	// condition written by the probe. They also mark the condition as the
	// probe's: once the probe is removed from the spec, a condition with one
	// of these reasons is removed, and any other is left to its author.
	ReasonProbeSucceeded = "ProbeSucceeded"
	ReasonProbeFailed    = "ProbeFailed"
	// ReasonProbeRefused: the probe was not sent, because the prober may
	// not reach the address (package probepolicy); the workload is not
	// Ready, at once, since no later probe can pass.
	ReasonProbeRefused = "ProbeRefused"
	// MaxMessageLength caps the condition's message.
	MaxMessageLength = 1024
)

// Status is what the probe has established about a workload in this term.
type Status int

const (
	// Unknown: no threshold reached yet; the condition stays as it is.
	Unknown Status = iota
	// Ready: successThreshold consecutive successes.
	Ready
	// NotReady: failureThreshold consecutive failures.
	NotReady
)

func (s Status) String() string {
	switch s {
	case Ready:
		return "Ready"
	case NotReady:
		return "NotReady"
	}
	return "Unknown"
}

// Thresholds are the probe's successThreshold and failureThreshold.
type Thresholds struct {
	Success, Failure int32
}

// ThresholdsOf returns the thresholds of a probe (at least 1 each).
func ThresholdsOf(p *watcherv1.ReadinessProbe) Thresholds {
	return Thresholds{Success: max(p.GetSuccessThreshold(), 1), Failure: max(p.GetFailureThreshold(), 1)}
}

// State is one workload's probe history in this term: what it established
// and the current run of equal results. A new term starts from the zero
// State, so the condition a former leader wrote holds until this term's own
// probes reach a threshold.
type State struct {
	Status Status
	// Successes and Failures are the consecutive results of the current
	// run (one of them is zero), counted up to their threshold.
	Successes, Failures int32
}

// Next is the state after one more probe result: successThreshold
// consecutive successes make the workload Ready, failureThreshold
// consecutive failures make it NotReady, anything shorter keeps the status.
func (s State) Next(ok bool, th Thresholds) State {
	if ok {
		s.Failures = 0
		s.Successes = min(s.Successes+1, th.Success)
		if s.Successes >= th.Success {
			s.Status = Ready
		}
		return s
	}
	s.Successes = 0
	s.Failures = min(s.Failures+1, th.Failure)
	if s.Failures >= th.Failure {
		s.Status = NotReady
	}
	return s
}

// Result is the outcome of probing one address of a workload.
type Result struct {
	OK bool
	// Refused: the address was not probed (not OK either); Detail says why.
	Refused bool
	// Detail says what was probed and what happened, as a sentence a user
	// reads in the condition's message.
	Detail string
}

// Combine is a workload's result from those of its addresses (at most one
// IPv4 and one IPv6): it passes only when every address passes, because
// its one Ready condition makes the endpoints of both families ready. The
// detail names the failing addresses, or every address when all passed.
func Combine(rs []Result) (ok bool, detail string) {
	if len(rs) == 0 {
		return false, "no address to probe"
	}
	var passed, failed []string
	for _, r := range rs {
		if r.OK {
			passed = append(passed, r.Detail)
		} else {
			failed = append(failed, r.Detail)
		}
	}
	if len(failed) > 0 {
		return false, strings.Join(failed, "; ")
	}
	return true, strings.Join(passed, "; ")
}

// Action is the write a decision asks for.
type Action int

const (
	// None: the condition already says what it should.
	None Action = iota
	// Set the Ready condition to Decision.Status.
	Set
	// Clear removes the Ready condition the probe wrote.
	Clear
)

// Decision is what to do with a workload's Ready condition.
type Decision struct {
	Action  Action
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// Decide says whether the Ready condition must be written. With a probe, the
// probe owns the condition: once the state has reached a threshold, a
// condition whose status differs from it (or a missing one) is set, and a
// condition that agrees is left alone, so a steady state writes nothing.
// Without a probe, a condition the probe wrote earlier is removed (the
// workload is then ready, like one never probed); a condition anybody else
// wrote is theirs. observed is the workload's Ready condition, nil if none;
// detail is the last probe's combined detail.
func Decide(hasProbe bool, st State, observed *watcherv1.Condition, detail string) Decision {
	if !hasProbe {
		if observed != nil && isProbes(observed.GetReason()) {
			return Decision{Action: Clear}
		}
		return Decision{}
	}
	var d Decision
	switch st.Status {
	case Ready:
		d = Decision{Action: Set, Status: metav1.ConditionTrue, Reason: ReasonProbeSucceeded, Message: detail}
	case NotReady:
		d = Decision{Action: Set, Status: metav1.ConditionFalse, Reason: ReasonProbeFailed,
			Message: fmt.Sprintf("%s (%d consecutive failures)", detail, st.Failures)}
	default:
		return Decision{}
	}
	// A refusal's message would be wrong once the address is probed (the
	// operator changed the flags): the first decision of the probes
	// replaces it, whatever its status.
	if observed != nil && observed.GetStatus() == string(d.Status) && observed.GetReason() != ReasonProbeRefused {
		return Decision{}
	}
	return truncate(d)
}

// DecideRefused is the decision for a workload with a probe whose address
// the prober may not reach: Ready=False, reason ProbeRefused, at once (no
// failureThreshold: nothing will change until an operator changes a flag or
// the tenant the address). A condition that already says so, with the same
// message, is left alone.
func DecideRefused(observed *watcherv1.Condition, detail string) Decision {
	d := truncate(Decision{Action: Set, Status: metav1.ConditionFalse, Reason: ReasonProbeRefused, Message: detail})
	if observed != nil && observed.GetStatus() == string(d.Status) && observed.GetReason() == d.Reason && observed.GetMessage() == d.Message {
		return Decision{}
	}
	return d
}

// Refused reports whether one of a workload's addresses was refused, and
// the refusals' details.
func Refused(rs []Result) (bool, string) {
	var why []string
	for _, r := range rs {
		if r.Refused {
			why = append(why, r.Detail)
		}
	}
	return len(why) > 0, strings.Join(why, "; ")
}

func truncate(d Decision) Decision {
	if len(d.Message) > MaxMessageLength {
		d.Message = d.Message[:MaxMessageLength-3] + "..."
	}
	return d
}

// isProbes: a Ready condition with this reason was written by the probe.
func isProbes(reason string) bool {
	return reason == ReasonProbeSucceeded || reason == ReasonProbeFailed || reason == ReasonProbeRefused
}

// ReadyCondition returns the workload's Ready condition, nil if it has none.
func ReadyCondition(ew *watcherv1.ExternalWorkload) *watcherv1.Condition {
	for _, c := range ew.GetConditions() {
		if c.GetType() == ConditionReady {
			return c
		}
	}
	return nil
}

// Conditions is the workload's whole conditions list after the decision:
// every other condition exactly as observed, Ready set (its
// lastTransitionTime is now when its status changes, kept otherwise) or
// removed. The list is written whole, conditional on the resourceVersion it
// was built from, so a concurrent change of any condition is never lost.
func Conditions(observed []*watcherv1.Condition, d Decision, generation int64, now time.Time) []metav1.Condition {
	var ready *metav1.Condition
	if d.Action == Set {
		ready = &metav1.Condition{Type: ConditionReady, Status: d.Status, Reason: d.Reason, Message: d.Message}
	}
	return WithCondition(observed, ConditionReady, ready, generation, now)
}

// WithCondition is the whole conditions list with the condition of type typ
// set to want, in its place (its lastTransitionTime now when its status
// changes, kept otherwise; observedGeneration generation), or removed when
// want is nil; every other condition exactly as observed. The endpoints
// leader's two condition writers share it: the prober's Ready and the
// controller's AddressAccepted.
func WithCondition(observed []*watcherv1.Condition, typ string, want *metav1.Condition, generation int64, now time.Time) []metav1.Condition {
	var set metav1.Condition
	if want != nil {
		set = *want
		set.Type, set.ObservedGeneration, set.LastTransitionTime = typ, generation, metav1.NewTime(now.UTC().Truncate(time.Second))
	}
	out := make([]metav1.Condition, 0, len(observed)+1)
	placed := false
	for _, c := range observed {
		if c.GetType() != typ {
			out = append(out, fromProto(c))
			continue
		}
		if want == nil || placed {
			continue
		}
		if c.GetStatus() == string(set.Status) && c.GetLastTransitionTime() != 0 {
			set.LastTransitionTime = metav1.NewTime(time.Unix(0, c.GetLastTransitionTime()).UTC())
		}
		out = append(out, set)
		placed = true
	}
	if want != nil && !placed {
		out = append(out, set)
	}
	return out
}

func fromProto(c *watcherv1.Condition) metav1.Condition {
	out := metav1.Condition{
		Type: c.GetType(), Status: metav1.ConditionStatus(c.GetStatus()), Reason: c.GetReason(), Message: c.GetMessage(),
		ObservedGeneration: c.GetObservedGeneration(),
	}
	if ts := c.GetLastTransitionTime(); ts != 0 {
		out.LastTransitionTime = metav1.NewTime(time.Unix(0, ts).UTC())
	}
	return out
}

// FirstProbe is when a workload is first probed: offset (a spread within
// the period, so a term that starts with many workloads does not probe them
// all at once) after now, and never before initialDelay after its creation.
func FirstProbe(created, now time.Time, initialDelay, offset time.Duration) time.Time {
	at := now.Add(offset)
	if earliest := created.Add(initialDelay); at.Before(earliest) {
		return earliest
	}
	return at
}
