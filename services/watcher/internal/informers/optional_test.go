package informers

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// An optional kind never holds the watcher unsynced: before discovery is
// asked it is not synced; absent, or not known to be served because
// discovery failed, it is synced and empty (and asked for again later).
func TestOptionalKindsAreSyncedWhenNotKnownToBeServed(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail bool
	}{{"absent", false}, {"discovery failing", true}} {
		t.Run(tc.name, func(t *testing.T) {
			disc := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}
			if tc.fail {
				disc.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("the server is currently unable to handle the request")
				})
			}
			o := &optionalInformers{disc: disc, log: slog.New(slog.DiscardHandler), m: newMetrics(), running: map[watcherv1.Kind]*runningInformer{}}
			if o.synced(watcherv1.Kind_KIND_GATEWAY) {
				t.Fatal("synced before discovery was asked")
			}
			o.reconcile(context.Background())
			for _, k := range []watcherv1.Kind{watcherv1.Kind_KIND_GATEWAY, watcherv1.Kind_KIND_GATEWAY_CLASS} {
				if !o.synced(k) {
					t.Errorf("%v not synced after discovery was asked", k)
				}
			}
		})
	}
}
