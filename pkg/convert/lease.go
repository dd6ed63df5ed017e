package convert

import (
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// CiliumL2LeasePrefix starts the name of the Lease Cilium's L2 announcer
// holds for each Service it announces, cilium-l2announce-<namespace>-<name>
// in the agent's namespace (cilium/cilium pkg/l2announcer/l2announcer.go,
// newLeaseLock; package announce reads it by the same name). The watcher
// streams no other Lease.
const CiliumL2LeasePrefix = "cilium-l2announce-"

// IsCiliumL2Lease reports whether a Lease's name is one of Cilium's L2
// announcement Leases.
func IsCiliumL2Lease(m metav1.Object) bool {
	return strings.HasPrefix(m.GetName(), CiliumL2LeasePrefix)
}

// Lease converts one of Cilium's L2 announcement Leases: its holder and
// when it was acquired, renewed and for how long.
func Lease(l *coordinationv1.Lease) *watcherv1.Object {
	body := &watcherv1.Lease{}
	if h := l.Spec.HolderIdentity; h != nil {
		body.HolderIdentity = *h
	}
	if t := l.Spec.AcquireTime; t != nil {
		body.AcquireTime = t.UnixNano()
	}
	if t := l.Spec.RenewTime; t != nil {
		body.RenewTime = t.UnixNano()
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil {
		body.LeaseDurationSeconds = *d
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE, Meta: Meta(l), Body: &watcherv1.Object_Lease{Lease: body}}
}
