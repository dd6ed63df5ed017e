package plan

import (
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// SetPools applies a changed pool set to a, then claims again every IP that
// one of our Services requests: which pool would serve a requester may have
// changed, and an older pending Service must not take an IP that a younger
// one may now claim. Every Service is decided again afterwards (Decide).
func SetPools(a *allocator.Allocator, pools []*allocator.Pool, services []*watcherv1.Object, env objects.Env, class objects.Class) allocator.PoolUpdate {
	upd := a.SetPools(pools)
	for _, s := range services {
		if !class.Serves(s) {
			continue
		}
		if req, err := objects.Request(s, env); err == nil && len(req.RequestedIPs) > 0 {
			_ = a.Claim(req) // a refused claim: Allocate says why
		}
	}
	return upd
}
