package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// TestLedgerShardsAreReadAtMostOncePerInterval: the watcher learns of ledger
// writes from their metadata and reads a shard that changed, at once when it
// was not read within --ledger-read-interval, else once the interval has
// passed, so that ipam's write of a shard per allocation is not streamed
// whole, twice, each time. The stream shows a shard's content at its first
// read, holds a write made within the interval back, removes a deleted
// shard at once (a read pending for it or not), streams the last content of
// a burst, and never streams a ConfigMap without the ledger label.
func TestLedgerShardsAreReadAtMostOncePerInterval(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	cms := env.Client.CoreV1().ConfigMaps(testenv.SystemNamespace)
	prefix := "ledger-read-" + env.Namespace(t, nil) + "-"
	shard := func(name, v string, labelled bool) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: prefix + name}, Data: map[string]string{"v": v}}
		if labelled {
			cm.Labels = map[string]string{"ipledger.io/ledger": "true"}
		}
		return cm
	}
	write := func(cm *corev1.ConfigMap, create bool) {
		t.Helper()
		var err error
		if create {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			t.Cleanup(func() { _ = cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}) })
		} else {
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// ours reads the next event about this test's ConfigMaps: "UPSERT a=1",
	// "DELETE a=1".
	ours := func(s *rawStream) string {
		t.Helper()
		for {
			ev := s.next(t)
			o := ev.GetObject()
			if name, ok := strings.CutPrefix(o.GetMeta().GetName(), prefix); ok {
				return strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_") + " " + name + "=" + o.GetConfigMap().GetData()["v"]
			}
		}
	}
	expect := func(s *rawStream, want string) {
		t.Helper()
		if got := ours(s); got != want {
			t.Fatalf("stream: %q, want %q", got, want)
		}
	}
	subscribe := func(interval time.Duration) *rawStream {
		w, _ := startWatcher(t, env, func(c *Config) { c.LedgerReadInterval = interval })
		s := watch(t, dial(t, w.Addr().String(), subscriberToken(t, env)), &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_LEDGER_CONFIG_MAP}})
		s.untilSynced(t)
		return s
	}

	t.Run("a write within the interval waits for it", func(t *testing.T) {
		s := subscribe(time.Hour)
		write(shard("a", "1", true), true)
		expect(s, "UPSERT a=1") // never read before: at once
		write(shard("a", "2", true), false)
		write(shard("plain", "1", false), true)
		// b is read at once, a's second write not before an hour: had
		// anything streamed a's write, it would come before b.
		write(shard("b", "1", true), true)
		expect(s, "UPSERT b=1")
		if err := cms.Delete(ctx, prefix+"a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		expect(s, "DELETE a=1")
	})

	t.Run("a burst ends with its last write", func(t *testing.T) {
		s := subscribe(50 * time.Millisecond)
		write(shard("c", "0", true), true)
		expect(s, "UPSERT c=0")
		for v := range 5 {
			write(shard("c", string(rune('1'+v)), true), false)
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			if got := ours(s); got != "UPSERT c=5" {
				return fmt.Errorf("last streamed %q, want UPSERT c=5", got)
			}
			return nil
		})
	})
}
