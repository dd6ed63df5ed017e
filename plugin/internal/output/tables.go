package output

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// Allocations is the table of `allocations`: NAMESPACE only when listing
// every namespace, as kubectl get -A. STATE tells an address a Service
// holds (Held) from one kept for a Service that released it (Kept until T);
// for a kept one, ALLOCATED (-o wide) is when it was released.
func Allocations(allocs []*ipamv1.Allocation, allNamespaces bool) *metav1.Table {
	t := &metav1.Table{}
	if allNamespaces {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: "Namespace", Type: "string"})
	}
	t.ColumnDefinitions = append(t.ColumnDefinitions,
		metav1.TableColumnDefinition{Name: "Service", Type: "string"},
		metav1.TableColumnDefinition{Name: "IP", Type: "string"},
		metav1.TableColumnDefinition{Name: "Pool", Type: "string"},
		metav1.TableColumnDefinition{Name: "State", Type: "string", Description: "Held, or Kept until the end of its pool's grace period"},
		metav1.TableColumnDefinition{Name: "Sharing Key", Type: "string", Priority: 1},
		metav1.TableColumnDefinition{Name: "Allocated", Type: "string", Priority: 1},
		metav1.TableColumnDefinition{Name: "UID", Type: "string", Priority: 1},
	)
	for _, a := range allocs {
		var cells []any
		if allNamespaces {
			cells = append(cells, a.GetService().GetNamespace())
		}
		cells = append(cells, a.GetService().GetName(), a.GetIp(), orNone(a.GetPool()), allocationState(a),
			orNone(a.GetSharingKey()), orNone(a.GetAllocatedAt()), orNone(a.GetService().GetUid()))
		t.Rows = append(t.Rows, metav1.TableRow{Cells: cells})
	}
	return t
}

// allocationState is Held, or "Kept until T" for an address kept for a
// Service that released it (an ipam before kept addresses never says so).
func allocationState(a *ipamv1.Allocation) string {
	if t := a.GetKeptUntil(); t != "" {
		return "Kept until " + t
	}
	return "Held"
}

// Pools is the table of `pools`: usage per family as USED/TOTAL, the
// Services that hold an address outside the pool, the addresses it keeps
// for Services that released them (counted in USED), and the Ready condition
// (as the leader last wrote it); -o wide adds, per family, what live
// Services hold (HELD, not the kept addresses) and what a new Service can
// get without taking a kept address (AVAILABLE), then priority, addresses
// and Ready's message.
func Pools(pools []*ipamv1.Pool) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string"},
		{Name: "IPv4", Type: "string", Description: "used/total"},
		{Name: "IPv6", Type: "string", Description: "used/total"},
		{Name: "Held Outside", Type: "integer"},
		{Name: "Kept", Type: "integer", Description: "addresses kept for Services that released them"},
		{Name: "Auto Assign", Type: "boolean"},
		{Name: "Ready", Type: "string"},
		{Name: "Reason", Type: "string"},
		{Name: "IPv4 Held", Type: "string", Priority: 1, Description: "addresses live Services hold (not kept ones)"},
		{Name: "IPv4 Available", Type: "string", Priority: 1, Description: "total - used: what a new Service gets without taking a kept address"},
		{Name: "IPv6 Held", Type: "string", Priority: 1, Description: "addresses live Services hold (not kept ones)"},
		{Name: "IPv6 Available", Type: "string", Priority: 1, Description: "total - used: what a new Service gets without taking a kept address"},
		{Name: "Priority", Type: "integer", Priority: 1},
		{Name: "Addresses", Type: "string", Priority: 1},
		{Name: "Message", Type: "string", Priority: 1},
	}}
	for _, p := range pools {
		ready := &ipamv1.PoolCondition{Status: "Unknown"}
		for _, c := range p.GetConditions() {
			if c.GetType() == "Ready" {
				ready = c
			}
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			p.GetName(), usage(p.GetIpv4()), usage(p.GetIpv6()), p.GetHeldOutside(), p.GetKept(), p.GetAutoAssign(),
			ready.GetStatus(), orNone(ready.GetReason()),
			count(p.GetIpv4(), p.GetIpv4().GetHeld()), count(p.GetIpv4(), p.GetIpv4().GetAvailable()),
			count(p.GetIpv6(), p.GetIpv6().GetHeld()), count(p.GetIpv6(), p.GetIpv6().GetAvailable()), p.GetPriority(), orNone(strings.Join(p.GetAddresses(), ",")), orNone(ready.GetMessage()),
		}})
	}
	return t
}

// usage is "used/total", or <none> for a family the pool lacks.
func usage(u *ipamv1.FamilyUsage) string {
	if u.GetTotal() == "" || u.GetTotal() == "0" {
		return "<none>"
	}
	return fmt.Sprintf("%s/%s", u.GetUsed(), u.GetTotal())
}

// count is n, one of a family's counts; <none> for a family the pool lacks,
// or a count an older ipam does not answer.
func count(u *ipamv1.FamilyUsage, n string) string {
	if u.GetTotal() == "" || u.GetTotal() == "0" {
		return "<none>"
	}
	return orNone(n)
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
