package app

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

var servicesOnly = []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE}

// TestWatchSnapshotDeltasFiltersAndResume: N objects give N UPSERTs and one
// SYNCED, then deltas with old and new; other namespaces and kinds are
// filtered out; a resume of the same epoch continues without a snapshot and a
// resume of another epoch gets one.
func TestWatchSnapshotDeltasFiltersAndResume(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns, other := env.Namespace(t, nil), env.Namespace(t, nil)
	const n = 25
	for i := range n {
		if _, err := env.Client.CoreV1().Services(ns).Create(ctx, service(ns, fmt.Sprintf("s%d", i), nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Client.CoreV1().Services(other).Create(ctx, service(other, "elsewhere", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, _ := startWatcher(t, env, nil)
	client := dial(t, w.Addr().String(), subscriberToken(t, env))
	req := &watcherv1.WatchRequest{Kinds: servicesOnly, Namespaces: []string{ns}}

	s := watch(t, client, req)
	snap, synced := s.untilSynced(t)
	if len(snap) != n {
		t.Fatalf("snapshot of %d UPSERTs, want %d", len(snap), n)
	}
	for _, ev := range snap {
		if ev.GetObject().GetMeta().GetNamespace() != ns || ev.GetObject().GetKind() != watcherv1.Kind_KIND_SERVICE || ev.GetOldObject() != nil {
			t.Fatalf("unexpected snapshot event %v", ev)
		}
	}
	if synced.GetResumed() || synced.GetEpoch() != w.Epoch() {
		t.Fatalf("SYNCED %v", synced)
	}

	// An update: UPSERT with old and new.
	s0, err := env.Client.CoreV1().Services(ns).Get(ctx, "s0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldRV := s0.ResourceVersion
	s0.Labels = map[string]string{"tier": "gold"}
	if _, err := env.Client.CoreV1().Services(ns).Update(ctx, s0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := s.next(t)
	if ev.GetType() != watcherv1.EventType_EVENT_TYPE_UPSERT || ev.GetObject().GetMeta().GetName() != "s0" ||
		ev.GetOldObject().GetMeta().GetResourceVersion() != oldRV || ev.GetObject().GetMeta().GetLabels()["tier"] != "gold" ||
		ev.GetRevision() <= synced.GetRevision() {
		t.Fatalf("update delta %v", ev)
	}

	// Changes in another namespace and of another kind are filtered: the next
	// event is the delete in ns that follows them.
	if _, err := env.Client.CoreV1().Services(other).Create(ctx, service(other, "filtered", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObj(ns+"-x"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.CoreV1().Services(ns).Delete(ctx, "s1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ev = s.next(t)
	if ev.GetType() != watcherv1.EventType_EVENT_TYPE_DELETE || ev.GetObject().GetMeta().GetName() != "s1" {
		t.Fatalf("want DELETE of s1, got %v", ev)
	}
	resumeAt := ev.GetResumeRevision()
	s.cancel()

	// Missed while away: an update and a delete.
	if err := env.Client.CoreV1().Services(ns).Delete(ctx, "s2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Services(ns).Create(ctx, service(ns, "s-new", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	resumed := watch(t, client, &watcherv1.WatchRequest{Kinds: servicesOnly, Namespaces: []string{ns},
		Resume: &watcherv1.ResumePoint{Epoch: w.Epoch(), Revision: resumeAt}})
	ev = resumed.next(t)
	if ev.GetType() != watcherv1.EventType_EVENT_TYPE_SYNCED || !ev.GetResumed() || ev.GetResumeRevision() != resumeAt {
		t.Fatalf("resume: first event %v, want SYNCED resumed at %d", ev, resumeAt)
	}
	got := []string{}
	for len(got) < 2 {
		ev = resumed.next(t)
		got = append(got, fmt.Sprintf("%v %s", ev.GetType(), ev.GetObject().GetMeta().GetName()))
	}
	if got[0] != "EVENT_TYPE_DELETE s2" || got[1] != "EVENT_TYPE_UPSERT s-new" {
		t.Fatalf("resumed deltas %q", got)
	}

	fresh := watch(t, client, &watcherv1.WatchRequest{Kinds: servicesOnly, Namespaces: []string{ns},
		Resume: &watcherv1.ResumePoint{Epoch: "another-process", Revision: resumeAt}})
	snap, synced = fresh.untilSynced(t)
	if synced.GetResumed() || len(snap) != n-1 { // s1, s2 gone; s-new added
		t.Fatalf("other epoch: %d UPSERTs resumed=%v, want a snapshot of %d", len(snap), synced.GetResumed(), n-1)
	}
}

func TestWatchAuthorization(t *testing.T) {
	env := testenv.Get(t)
	w, _ := startWatcher(t, env, nil)
	ns := env.Namespace(t, nil)
	req := &watcherv1.WatchRequest{Kinds: servicesOnly}
	if code := watchErr(t, dial(t, w.Addr().String(), env.TokenFile(t, ns, "nobody")), req); code != codes.PermissionDenied {
		t.Errorf("token without snapshots/watch: %v, want PermissionDenied", code)
	}
	if code := watchErr(t, dial(t, w.Addr().String(), ""), req); code != codes.Unauthenticated {
		t.Errorf("no token: %v, want Unauthenticated", code)
	}
	if code := watchErr(t, dial(t, w.Addr().String(), subscriberToken(t, env)), &watcherv1.WatchRequest{}); code != codes.InvalidArgument {
		t.Errorf("no kinds: %v, want InvalidArgument", code)
	}
}
