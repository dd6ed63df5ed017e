package controller

import (
	"testing"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func TestPoolSpecChanged(t *testing.T) {
	pool := func(addrs []string, cond string, rv string) *watcherv1.Object {
		return &watcherv1.Object{Kind: watcherv1.Kind_KIND_IP_POOL,
			Meta: &watcherv1.ObjectMeta{Name: "p", ResourceVersion: rv, CreationTimestamp: 1},
			Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: addrs,
				Conditions: []*watcherv1.Condition{{Type: "Ready", Status: cond}}}}}
	}
	base := pool([]string{"10.0.0.0/24"}, "True", "1")
	if poolSpecChanged(base, pool([]string{"10.0.0.0/24"}, "False", "2")) {
		t.Error("a status-only update (our own usage write) counts as a spec change: every Service would be decided again")
	}
	if !poolSpecChanged(base, pool([]string{"10.0.1.0/24"}, "True", "3")) {
		t.Error("a changed address list does not count as a spec change")
	}
	if !poolSpecChanged(&watcherv1.Object{Meta: &watcherv1.ObjectMeta{Name: "p"}}, base) {
		t.Error("an update from an object without a pool body must count as a change")
	}
}
