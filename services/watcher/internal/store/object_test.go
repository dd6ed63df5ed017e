package store

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// TestObjectReadsItsEncoding: what the store filters by (namespace, name,
// labels) is read back from the key and the encoding, for every shape of
// metadata the compact form carries around the labels.
func TestObjectReadsItsEncoding(t *testing.T) {
	tests := []struct {
		name                string
		obj                 *watcherv1.Object
		wantNS, wantName    string
		wantLabels          labels.Set
		wantResourceVersion string
	}{
		{
			name:   "namespaced with labels among other metadata and a body",
			obj:    &watcherv1.Object{Kind: watcherv1.Kind_KIND_POD, Meta: &watcherv1.ObjectMeta{Namespace: "ns", Name: "p", Uid: "u", ResourceVersion: "7", Labels: map[string]string{"app": "a", "team": "x", "empty": ""}, Annotations: map[string]string{"ipledger.io/x": "y"}, Finalizers: []string{"f"}}, Body: &watcherv1.Object_Pod{Pod: &watcherv1.Pod{NodeName: "n"}}},
			wantNS: "ns", wantName: "p", wantLabels: labels.Set{"app": "a", "team": "x", "empty": ""}, wantResourceVersion: "7",
		},
		{
			name:   "cluster-scoped without labels",
			obj:    &watcherv1.Object{Kind: watcherv1.Kind_KIND_NODE, Meta: &watcherv1.ObjectMeta{Name: "node-1", ResourceVersion: "3"}},
			wantNS: "", wantName: "node-1", wantResourceVersion: "3",
		},
		{
			name:   "no metadata at all",
			obj:    &watcherv1.Object{Kind: watcherv1.Kind_KIND_NAMESPACE},
			wantNS: "", wantName: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Encode(tt.obj)
			if o.Kind() != tt.obj.GetKind() || o.Namespace() != tt.wantNS || o.Name() != tt.wantName || o.ResourceVersion() != tt.wantResourceVersion {
				t.Errorf("kind %v namespace %q name %q resourceVersion %q, want %v %q %q %q", o.Kind(), o.Namespace(), o.Name(), o.ResourceVersion(),
					tt.obj.GetKind(), tt.wantNS, tt.wantName, tt.wantResourceVersion)
			}
			if got := o.Labels(); !labels.Equals(got, tt.wantLabels) {
				t.Errorf("labels %v, want %v", got, tt.wantLabels)
			}
		})
	}
}

// TestEqualStatesEncodeEqually: the store tells a change from a repeat by the
// bytes, so map order must not make equal states differ.
func TestEqualStatesEncodeEqually(t *testing.T) {
	lbls := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		lbls[k] = k
	}
	st := New("e", 10)
	for range 20 {
		st.Upsert(svc("a", "1", lbls))
	}
	if st.Revision() != 1 {
		t.Fatalf("revision %d after 20 upserts of one state, want 1", st.Revision())
	}
}
