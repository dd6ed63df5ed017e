package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/testenv"
)

// A term's recorder writes Events as the configured component.
func TestTermRecorderWritesEvents(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	cfg := testConfig(ns, "a")
	cfg.Events, cfg.EventComponent = env.Client.CoreV1(), "ipledger-test"
	startCandidate(t, env.Client, cfg, func(term *leader.Term) (leader.Worker, error) {
		return leader.WorkerFunc(func(term *leader.Term) error {
			ref := &corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: ns, Name: "subject"}
			term.Recorder().Event(ref, corev1.EventTypeNormal, "TermEvent", "written by "+term.ID())
			<-term.Stopping()
			return nil
		}), nil
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=TermEvent"})
		if err == nil && len(evs.Items) > 0 {
			if got := evs.Items[0].Source.Component; got != "ipledger-test" {
				t.Fatalf("Event source component %q, want ipledger-test", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TermEvent Event within 30s (err %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
