package readiness

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func TestNext(t *testing.T) {
	th := Thresholds{Success: 2, Failure: 3}
	cases := []struct {
		name    string
		from    State
		results string // s = success, f = failure, in order
		want    State
	}{
		{"nothing probed yet", State{}, "", State{}},
		{"one success is short of successThreshold 2", State{}, "s", State{Status: Unknown, Successes: 1}},
		{"two successes make it Ready", State{}, "ss", State{Status: Ready, Successes: 2}},
		{"a failure in between starts the count again", State{}, "sfs", State{Status: Unknown, Successes: 1}},
		{"two failures are short of failureThreshold 3", State{}, "ff", State{Status: Unknown, Failures: 2}},
		{"three failures make it NotReady", State{}, "fff", State{Status: NotReady, Failures: 3}},
		{"Ready stays Ready through two failures", State{Status: Ready}, "ff", State{Status: Ready, Failures: 2}},
		{"Ready becomes NotReady on the third failure in a row", State{Status: Ready}, "fff", State{Status: NotReady, Failures: 3}},
		{"a success resets the failures of a Ready workload", State{Status: Ready}, "ffsff", State{Status: Ready, Failures: 2}},
		{"NotReady stays NotReady on one success", State{Status: NotReady}, "s", State{Status: NotReady, Successes: 1}},
		{"NotReady becomes Ready on the second success in a row", State{Status: NotReady}, "ss", State{Status: Ready, Successes: 2}},
		{"flapping never reaches a threshold", State{Status: NotReady}, "sfsfsf", State{Status: NotReady, Failures: 1}},
		{"counts stop growing past the threshold", State{Status: Ready}, "ssssssssss", State{Status: Ready, Successes: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.from
			for _, r := range tc.results {
				st = st.Next(r == 's', th)
			}
			if st != tc.want {
				t.Fatalf("after %q from %+v: %+v, want %+v", tc.results, tc.from, st, tc.want)
			}
		})
	}
}

func TestThresholdsOfOne(t *testing.T) {
	th := Thresholds{Success: 1, Failure: 1}
	if st := (State{}).Next(true, th); st.Status != Ready {
		t.Fatalf("one success with successThreshold 1: %v", st.Status)
	}
	if st := (State{Status: Ready}).Next(false, th); st.Status != NotReady {
		t.Fatalf("one failure with failureThreshold 1: %v", st.Status)
	}
}

func TestCombine(t *testing.T) {
	ok4 := Result{OK: true, Detail: "TCP probe of 192.0.2.1:22 succeeded"}
	ok6 := Result{OK: true, Detail: "TCP probe of [2001:db8::1]:22 succeeded"}
	bad6 := Result{Detail: "TCP probe of [2001:db8::1]:22: connection refused"}
	bad4 := Result{Detail: "TCP probe of 192.0.2.1:22: timed out after 1s"}
	cases := []struct {
		name   string
		in     []Result
		ok     bool
		detail string
	}{
		{"one address passes", []Result{ok4}, true, ok4.Detail},
		{"one address fails", []Result{bad4}, false, bad4.Detail},
		{"every address passes", []Result{ok4, ok6}, true, ok4.Detail + "; " + ok6.Detail},
		{"one of two fails: the workload fails, naming that address", []Result{ok4, bad6}, false, bad6.Detail},
		{"both fail", []Result{bad4, bad6}, false, bad4.Detail + "; " + bad6.Detail},
		{"no address: nothing to probe fails", nil, false, "no address to probe"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, detail := Combine(tc.in)
			if ok != tc.ok || detail != tc.detail {
				t.Fatalf("Combine = %v %q, want %v %q", ok, detail, tc.ok, tc.detail)
			}
		})
	}
}

func cond(status, reason string) *watcherv1.Condition {
	return &watcherv1.Condition{Type: ConditionReady, Status: status, Reason: reason}
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name     string
		probe    bool
		state    State
		observed *watcherv1.Condition
		want     Action
		status   metav1.ConditionStatus
		reason   string
	}{
		{"probe, nothing established yet: no write", true, State{Successes: 1}, nil, None, "", ""},
		{"probe passes, no condition: write True", true, State{Status: Ready, Successes: 1}, nil, Set, metav1.ConditionTrue, ReasonProbeSucceeded},
		{"probe fails, no condition: write False", true, State{Status: NotReady, Failures: 3}, nil, Set, metav1.ConditionFalse, ReasonProbeFailed},
		{"probe passes, condition already True: steady state writes nothing", true, State{Status: Ready}, cond("True", ReasonProbeSucceeded), None, "", ""},
		{"probe fails, condition already False: nothing", true, State{Status: NotReady}, cond("False", ReasonProbeFailed), None, "", ""},
		{"probe passes, condition False: write True", true, State{Status: Ready}, cond("False", ReasonProbeFailed), Set, metav1.ConditionTrue, ReasonProbeSucceeded},
		{"probe fails, condition True: write False", true, State{Status: NotReady}, cond("True", ReasonProbeSucceeded), Set, metav1.ConditionFalse, ReasonProbeFailed},
		{"probe fails, someone wrote True by hand: the probe owns the condition", true, State{Status: NotReady}, cond("True", "Manual"), Set, metav1.ConditionFalse, ReasonProbeFailed},
		{"probe passes, Unknown condition: write True", true, State{Status: Ready}, cond("Unknown", "Manual"), Set, metav1.ConditionTrue, ReasonProbeSucceeded},
		{"no probe, no condition: nothing", false, State{}, nil, None, "", ""},
		{"no probe, a condition written by hand is the operator's: kept", false, State{}, cond("False", "Maintenance"), None, "", ""},
		{"no probe any more, the probe's False condition is removed", false, State{}, cond("False", ReasonProbeFailed), Clear, "", ""},
		{"no probe any more, the probe's True condition is removed", false, State{}, cond("True", ReasonProbeSucceeded), Clear, "", ""},
		{"no probe any more, the prober's refusal is removed", false, State{}, cond("False", ReasonProbeRefused), Clear, "", ""},
		{"probed again after a refusal and failing: the refusal's message is replaced", true, State{Status: NotReady}, cond("False", ReasonProbeRefused), Set, metav1.ConditionFalse, ReasonProbeFailed},
		{"probed again after a refusal, nothing established yet: the refusal stays", true, State{Failures: 1}, cond("False", ReasonProbeRefused), None, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.probe, tc.state, tc.observed, "detail")
			if d.Action != tc.want || d.Status != tc.status || d.Reason != tc.reason {
				t.Fatalf("Decide = %+v, want %v %q %q", d, tc.want, tc.status, tc.reason)
			}
		})
	}
}

func TestDecideMessage(t *testing.T) {
	d := Decide(true, State{Status: NotReady, Failures: 3}, nil, "TCP probe of 127.0.0.1:8080: connection refused")
	if d.Message != "TCP probe of 127.0.0.1:8080: connection refused (3 consecutive failures)" {
		t.Fatalf("message %q", d.Message)
	}
	d = Decide(true, State{Status: Ready, Successes: 1}, nil, "HTTP probe GET http://127.0.0.1:8080/: 200 OK")
	if d.Message != "HTTP probe GET http://127.0.0.1:8080/: 200 OK" {
		t.Fatalf("message %q", d.Message)
	}
	d = Decide(true, State{Status: Ready}, nil, strings.Repeat("x", 5000))
	if len(d.Message) > MaxMessageLength {
		t.Fatalf("message of %d bytes, want at most %d", len(d.Message), MaxMessageLength)
	}
}

func TestDecideRefused(t *testing.T) {
	const msg = "TCP probe of fd00:ec2::254 not probed: fd00:ec2::254 is AWS's instance services"
	withMessage := func(status, reason, m string) *watcherv1.Condition {
		c := cond(status, reason)
		c.Message = m
		return c
	}
	for _, tc := range []struct {
		name     string
		observed *watcherv1.Condition
		want     Action
	}{
		{"no condition yet: False at once, no threshold", nil, Set},
		{"True (probed before the flags changed): False", withMessage("True", ReasonProbeSucceeded, "ok"), Set},
		{"False because probes failed: says why now", withMessage("False", ReasonProbeFailed, "refused"), Set},
		{"True by hand: the probe owns the condition", withMessage("True", "Manual", ""), Set},
		{"already refused for another reason: rewritten", withMessage("False", ReasonProbeRefused, "other"), Set},
		{"already says so: nothing", withMessage("False", ReasonProbeRefused, msg), None},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideRefused(tc.observed, msg)
			if d.Action != tc.want {
				t.Fatalf("DecideRefused = %+v, want %v", d, tc.want)
			}
			if d.Action == Set && (d.Status != metav1.ConditionFalse || d.Reason != ReasonProbeRefused || d.Message != msg) {
				t.Fatalf("DecideRefused = %+v", d)
			}
		})
	}
	if refused, why := Refused([]Result{{OK: true, Detail: "a"}, {Refused: true, Detail: "b"}}); !refused || why != "b" {
		t.Fatalf("Refused = %v %q", refused, why)
	}
	if refused, _ := Refused([]Result{{OK: true}, {Detail: "failed"}}); refused {
		t.Fatal("a failed probe is not a refusal")
	}
}

func TestConditions(t *testing.T) {
	earlier := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	other := &watcherv1.Condition{Type: "Maintenance", Status: "False", Reason: "None", Message: "m", ObservedGeneration: 1, LastTransitionTime: earlier.UnixNano()}
	set := Decision{Action: Set, Status: metav1.ConditionTrue, Reason: ReasonProbeSucceeded, Message: "ok"}

	got := Conditions([]*watcherv1.Condition{other, cond("False", ReasonProbeFailed)}, set, 7, now)
	if len(got) != 2 || got[0].Type != "Maintenance" || !got[0].LastTransitionTime.Time.Equal(earlier) || got[0].ObservedGeneration != 1 {
		t.Fatalf("other conditions must be kept as they are: %+v", got)
	}
	r := got[1]
	if r.Type != ConditionReady || r.Status != metav1.ConditionTrue || r.Reason != ReasonProbeSucceeded || r.Message != "ok" ||
		r.ObservedGeneration != 7 || !r.LastTransitionTime.Time.Equal(now) {
		t.Fatalf("Ready condition %+v", r)
	}

	got = Conditions([]*watcherv1.Condition{cond("True", "Manual"), other}, set, 7, now)
	if len(got) != 2 || got[0].Type != ConditionReady || got[0].Reason != ReasonProbeSucceeded || got[0].LastTransitionTime.Time.IsZero() || got[1].Type != "Maintenance" {
		t.Fatalf("Ready is replaced where it is: %+v", got)
	}

	got = Conditions([]*watcherv1.Condition{other}, set, 7, now)
	if len(got) != 2 || got[1].Type != ConditionReady {
		t.Fatalf("Ready is added after the others: %+v", got)
	}

	got = Conditions([]*watcherv1.Condition{cond("True", ReasonProbeSucceeded), other}, Decision{Action: Clear}, 7, now)
	if len(got) != 1 || got[0].Type != "Maintenance" {
		t.Fatalf("Clear removes only Ready: %+v", got)
	}
}

func TestFirstProbe(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name         string
		now          time.Time
		initialDelay time.Duration
		offset       time.Duration
		want         time.Time
	}{
		{"old workload: after the spreading offset", created.Add(time.Hour), 30 * time.Second, 3 * time.Second, created.Add(time.Hour + 3*time.Second)},
		{"new workload: not before its initial delay", created.Add(time.Second), 30 * time.Second, 3 * time.Second, created.Add(30 * time.Second)},
		{"initial delay passed during the offset", created.Add(28 * time.Second), 30 * time.Second, 3 * time.Second, created.Add(31 * time.Second)},
		{"no initial delay, no offset: now", created.Add(time.Second), 0, 0, created.Add(time.Second)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := FirstProbe(created, tc.now, tc.initialDelay, tc.offset); !got.Equal(tc.want) {
				t.Fatalf("FirstProbe = %s, want %s", got, tc.want)
			}
		})
	}
}
