package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/leader"
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
	testenv.Eventually(t, 30*time.Second, func() error {
		evs, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=TermEvent"})
		switch {
		case err != nil:
			return err
		case len(evs.Items) == 0:
			return fmt.Errorf("no TermEvent Event yet")
		case evs.Items[0].Source.Component != "ipledger-test":
			t.Fatalf("Event source component %q, want ipledger-test", evs.Items[0].Source.Component)
		}
		return nil
	})
}
