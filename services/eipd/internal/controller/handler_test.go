package controller

import (
	"io"
	"log/slog"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

type recordingQueue struct{ added []string }

func (q *recordingQueue) Add(item string)                       { q.added = append(q.added, item) }
func (q *recordingQueue) AddAfter(item string, _ time.Duration) { q.added = append(q.added, item) }

func nodeObj(rv string, labels, annotations map[string]string, providerID string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_NODE,
		Meta: &watcherv1.ObjectMeta{Name: "n1", ResourceVersion: rv, Labels: labels, Annotations: annotations},
		Body: &watcherv1.Object_Node{Node: &watcherv1.Node{ProviderId: providerID}}}
}

func tainted(o *watcherv1.Object, keys ...string) *watcherv1.Object {
	o.GetNode().TaintKeys = keys
	return o
}

func cordoned(o *watcherv1.Object) *watcherv1.Object {
	o.GetNode().Unschedulable = true
	return o
}

func TestHandlerEnqueuesOnlyWhatMatters(t *testing.T) {
	want := map[string]string{LabelAutoAssign: "true"}
	published := map[string]string{AnnotationAllocationID: "e-1"}
	tests := []struct {
		name     string
		old, new *watcherv1.Object
		deleted  bool
		enqueued bool
	}{
		{name: "add of a labelled node", new: nodeObj("1", want, nil, "aws:///z/i-1"), enqueued: true},
		{name: "add of an unlabelled node", new: nodeObj("1", nil, nil, "aws:///z/i-1")},
		{name: "add of an unlabelled node still holding an EIP", new: nodeObj("1", nil, published, "aws:///z/i-1"), enqueued: true},
		{name: "heartbeat: only the resourceVersion moves", old: nodeObj("1", want, nil, "p"), new: nodeObj("2", want, nil, "p")},
		{name: "providerID set", old: nodeObj("1", want, nil, ""), new: nodeObj("2", want, nil, "p"), enqueued: true},
		{name: "label removed", old: nodeObj("1", want, published, "p"), new: nodeObj("2", nil, published, "p"), enqueued: true},
		{name: "annotation tampered with", old: nodeObj("1", want, published, "p"), new: nodeObj("2", want, nil, "p"), enqueued: true},
		{name: "unrelated node changes", old: nodeObj("1", map[string]string{"a": "1"}, nil, "p"), new: nodeObj("2", map[string]string{"a": "2"}, nil, "p")},
		{name: "eipd removed its startup taint", old: tainted(nodeObj("1", want, published, "p"), "x/other", DefaultStartupTaint),
			new: tainted(nodeObj("2", want, published, "p"), "x/other")},
		{name: "another taint removed", old: tainted(nodeObj("1", want, published, "p"), "x/other", DefaultStartupTaint),
			new: tainted(nodeObj("2", want, published, "p"), DefaultStartupTaint), enqueued: true},
		{name: "cordoned", old: nodeObj("1", want, published, "p"), new: cordoned(nodeObj("2", want, published, "p")), enqueued: true},
		{name: "delete of a labelled node", new: nodeObj("1", want, nil, "p"), deleted: true, enqueued: true},
		{name: "delete of an unlabelled node", new: nodeObj("1", nil, nil, "p"), deleted: true},
	}
	c, err := New(Config{ClusterID: "test"}, nil, nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := &recordingQueue{}
			h := c.NewNodeReconciler(q, nil).Handler()
			switch {
			case tt.deleted:
				h.OnDelete(tt.new)
			case tt.old == nil:
				h.OnAdd(tt.new)
			default:
				h.OnUpdate(tt.old, tt.new)
			}
			if got := len(q.added) > 0; got != tt.enqueued {
				t.Errorf("enqueued = %v, want %v", got, tt.enqueued)
			}
		})
	}
}

func TestOptInLabels(t *testing.T) {
	operator := map[string]string{LabelOptIn: "true"}
	legacy := map[string]string{LabelAutoAssign: "true"}
	for _, tt := range []struct {
		legacyOptIn     string
		labels          map[string]string
		wants, enqueued bool
	}{
		{legacyOptIn: "", labels: legacy, wants: true, enqueued: true}, // the default accepts it (deprecated)
		{legacyOptIn: LegacyOptInAccept, labels: legacy, wants: true, enqueued: true},
		{legacyOptIn: LegacyOptInIgnore, labels: legacy},
		{legacyOptIn: LegacyOptInIgnore, labels: operator, wants: true, enqueued: true},
		{legacyOptIn: LegacyOptInAccept, labels: operator, wants: true, enqueued: true},
	} {
		c, err := New(Config{ClusterID: "test", LegacyOptIn: tt.legacyOptIn}, nil, nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
		if err != nil {
			t.Fatal(err)
		}
		n := nodeObj("1", tt.labels, nil, "aws:///z/i-1")
		q := &recordingQueue{}
		c.NewNodeReconciler(q, nil).Handler().OnAdd(n)
		if got := c.Wants(n); got != tt.wants {
			t.Errorf("--legacy-opt-in=%q, labels %v: Wants = %v, want %v", tt.legacyOptIn, tt.labels, got, tt.wants)
		}
		if got := len(q.added) > 0; got != tt.enqueued {
			t.Errorf("--legacy-opt-in=%q, labels %v: enqueued = %v, want %v", tt.legacyOptIn, tt.labels, got, tt.enqueued)
		}
	}
	if _, err := New(Config{ClusterID: "test", LegacyOptIn: "yes"}, nil, nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil); err == nil {
		t.Error("--legacy-opt-in=yes accepted")
	}
	if _, err := New(Config{ClusterID: "test", InstanceClusterTag: "novalue"}, nil, nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil); err == nil {
		t.Error("--instance-cluster-tag=novalue accepted")
	}
}
