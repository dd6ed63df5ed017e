package objects

import (
	"errors"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
)

func service(typ, class string, deleting bool) *watcherv1.Object {
	o := &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE, Meta: &watcherv1.ObjectMeta{Namespace: "n", Name: "s"},
		Body: &watcherv1.Object_Service{Service: &watcherv1.Service{Type: typ, LoadBalancerClass: class}}}
	if deleting {
		o.Meta.DeletionTimestamp = 1
	}
	return o
}

func TestClassServes(t *testing.T) {
	for _, tc := range []struct {
		obj                *watcherv1.Object
		want, wantRequired bool
	}{
		{service("LoadBalancer", "", false), true, false},
		{service("LoadBalancer", DefaultLBClass, false), true, true},
		{service("LoadBalancer", "example.com/other", false), false, false},
		{service("ClusterIP", "", false), false, false},
		{service("ClusterIP", DefaultLBClass, false), false, false},
		{service("LoadBalancer", "", true), false, false},
		{service("LoadBalancer", DefaultLBClass, true), false, false},
	} {
		if got := (Class{Name: DefaultLBClass}).Serves(tc.obj); got != tc.want {
			t.Errorf("Serves(%v) = %v", tc.obj, got)
		}
		if got := (Class{Name: DefaultLBClass, Required: true}).Serves(tc.obj); got != tc.wantRequired {
			t.Errorf("Serves(%v) with the class required = %v", tc.obj, got)
		}
	}
}

func TestRequestErrorsNameTheField(t *testing.T) {
	o := service("LoadBalancer", "", false)
	o.GetService().IpFamilies = []string{"IPv5"}
	_, err := Request(o, Env{})
	var ae *allocator.Error
	if !errors.As(err, &ae) || ae.Reason != allocator.ReasonInvalidRequest || !strings.Contains(ae.Message, "spec.ipFamilies") {
		t.Fatalf("Request() error = %v", err)
	}
}

func TestSharingUsesSelectorOnlyForLocal(t *testing.T) {
	o := service("LoadBalancer", "", false)
	o.GetService().Selector, o.GetService().HasSelector = map[string]string{"app": "x"}, true
	o.GetService().Ports = []*watcherv1.ServicePort{{Protocol: "UDP", Port: 53}}
	if sh := Sharing(o, "k"); sh.Local || sh.Selector != nil || len(sh.Ports) != 1 || sh.Key != "k" {
		t.Errorf("Cluster policy sharing = %+v", sh)
	}
	o.GetService().ExternalTrafficPolicy = "Local"
	if sh := Sharing(o, "k"); !sh.Local || sh.Selector["app"] != "x" {
		t.Errorf("Local policy sharing = %+v", sh)
	}
}

func TestLessOrdersByKey(t *testing.T) {
	parts := []string{"a", "a-b", "a0", "ab", "b", "", "a/"}
	namespaces := []string{"a", "a-b", "a0", "ab", "b", "a/"} // a Service always has one
	for _, ns1 := range namespaces {
		for _, n1 := range parts {
			for _, ns2 := range namespaces {
				for _, n2 := range parts {
					a := &watcherv1.Object{Meta: &watcherv1.ObjectMeta{Namespace: ns1, Name: n1}}
					b := &watcherv1.Object{Meta: &watcherv1.ObjectMeta{Namespace: ns2, Name: n2}}
					if got, want := Less(a, b), strings.Compare(objkey.Of(a), objkey.Of(b)); got != want {
						t.Errorf("Less(%s, %s) = %d, want %d", objkey.Of(a), objkey.Of(b), got, want)
					}
				}
			}
		}
	}
}

// TestCompareByAgeAgreesWithLess: the order read from creation times and
// keys is the order of the objects.
func TestCompareByAgeAgreesWithLess(t *testing.T) {
	objs := []*watcherv1.Object{}
	for _, ns := range []string{"a", "a-b", "a0", "b"} {
		for _, name := range []string{"x", "y"} {
			for _, created := range []int64{1, 2} {
				objs = append(objs, &watcherv1.Object{Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: created}})
			}
		}
	}
	for _, a := range objs {
		for _, b := range objs {
			got := CompareByAge(a.GetMeta().GetCreationTimestamp(), objkey.Of(a), b.GetMeta().GetCreationTimestamp(), objkey.Of(b))
			if want := Less(a, b); got != want {
				t.Errorf("CompareByAge(%s@%d, %s@%d) = %d, Less = %d", objkey.Of(a), a.GetMeta().GetCreationTimestamp(),
					objkey.Of(b), b.GetMeta().GetCreationTimestamp(), got, want)
			}
		}
	}
}

func TestPoolSetKeepsTheLastValidSpec(t *testing.T) {
	pool := func(uid string, addresses ...string) *watcherv1.Object {
		return &watcherv1.Object{
			Kind: watcherv1.Kind_KIND_IP_POOL,
			Meta: &watcherv1.ObjectMeta{Name: "p", Uid: uid},
			Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: addresses, AutoAssign: true}},
		}
	}
	var set PoolSet
	total := func(pools []*allocator.Pool) string {
		if len(pools) != 1 {
			return "none"
		}
		return pools[0].Total(allocator.IPv4).String()
	}
	steps := []struct {
		name        string
		obj         *watcherv1.Object
		wantTotal   string
		wantInvalid string
	}{
		{"first valid", pool("u1", "10.0.0.0/30"), "4", ""},
		{"mistyped range keeps the last valid spec", pool("u1", "10.0.1.20-10.0.1.10"), "4", `spec.addresses[0] "10.0.1.20-10.0.1.10": range starts after it ends; write it as 10.0.1.10-10.0.1.20`},
		{"fixed", pool("u1", "10.0.0.0/29"), "8", ""},
		{"re-created (new UID) invalid serves nothing", pool("u2", "10.0.0.1"), "none", "spec.addresses[0]"},
	}
	for _, st := range steps {
		pools, invalid := set.Parse([]*watcherv1.Object{st.obj})
		if got := total(pools); got != st.wantTotal {
			t.Fatalf("%s: total = %s, want %s", st.name, got, st.wantTotal)
		}
		if err := invalid["p"]; (err == nil) != (st.wantInvalid == "") || err != nil && !strings.Contains(err.Error(), st.wantInvalid) {
			t.Fatalf("%s: invalid = %v, want %q", st.name, err, st.wantInvalid)
		}
	}
}

// countingGetter counts the Gets it answers.
type countingGetter struct {
	Index
	gets int
}

func (c *countingGetter) Get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool) {
	c.gets++
	return c.Index.Get(kind, namespace, name)
}

// TestMemoAsksOnce: a decision's Env asks the stream once per object, found
// or not, and answers the same every time.
func TestMemoAsksOnce(t *testing.T) {
	ns := &watcherv1.Object{Kind: watcherv1.Kind_KIND_NAMESPACE, Meta: &watcherv1.ObjectMeta{Name: "team-a"}}
	g := &countingGetter{Index: NewIndex(ns)}
	m := Memo(g)
	for range 3 {
		if got, ok := m.Get(watcherv1.Kind_KIND_NAMESPACE, "", "team-a"); !ok || got != ns {
			t.Fatalf("Get(team-a) = %v, %v; want the Namespace", got, ok)
		}
		if _, ok := m.Get(watcherv1.Kind_KIND_NAMESPACE, "", "team-b"); ok {
			t.Fatal("Get(team-b) found a Namespace that does not exist")
		}
	}
	if g.gets != 2 {
		t.Fatalf("the stream was asked %d times, want 2 (once per object)", g.gets)
	}
}
