package output

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// Allocations is the table of `allocations`: NAMESPACE only when listing
// every namespace, as kubectl get -A.
func Allocations(allocs []*ipamv1.Allocation, allNamespaces bool) *metav1.Table {
	t := &metav1.Table{}
	if allNamespaces {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: "Namespace", Type: "string"})
	}
	t.ColumnDefinitions = append(t.ColumnDefinitions,
		metav1.TableColumnDefinition{Name: "Service", Type: "string"},
		metav1.TableColumnDefinition{Name: "IP", Type: "string"},
		metav1.TableColumnDefinition{Name: "Pool", Type: "string"},
		metav1.TableColumnDefinition{Name: "Sharing Key", Type: "string", Priority: 1},
		metav1.TableColumnDefinition{Name: "Allocated", Type: "string", Priority: 1},
		metav1.TableColumnDefinition{Name: "UID", Type: "string", Priority: 1},
	)
	for _, a := range allocs {
		var cells []any
		if allNamespaces {
			cells = append(cells, a.GetService().GetNamespace())
		}
		cells = append(cells, a.GetService().GetName(), a.GetIp(), a.GetPool(),
			orNone(a.GetSharingKey()), orNone(a.GetAllocatedAt()), orNone(a.GetService().GetUid()))
		t.Rows = append(t.Rows, metav1.TableRow{Cells: cells})
	}
	return t
}

// Pools is the table of `pools`: usage per family as USED/TOTAL, the
// Services held outside the pool, and the Ready condition's reason.
func Pools(pools []*ipamv1.Pool) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string"},
		{Name: "IPv4", Type: "string", Description: "used/total"},
		{Name: "IPv6", Type: "string", Description: "used/total"},
		{Name: "Held Outside", Type: "integer"},
		{Name: "Auto Assign", Type: "boolean"},
		{Name: "Conditions", Type: "string"},
		{Name: "Priority", Type: "integer", Priority: 1},
		{Name: "Addresses", Type: "string", Priority: 1},
	}}
	for _, p := range pools {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			p.GetName(), usage(p.GetIpv4()), usage(p.GetIpv6()), p.GetHeldOutside(), p.GetAutoAssign(),
			conditions(p.GetConditions()), p.GetPriority(), strings.Join(p.GetAddresses(), ","),
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

// conditions lists the true conditions by type, and each false one with its
// reason, e.g. "Ready" or "Ready=False(Overlaps)".
func conditions(cs []*ipamv1.PoolCondition) string {
	var out []string
	for _, c := range cs {
		s := c.GetType()
		if c.GetStatus() != "True" {
			s = fmt.Sprintf("%s=%s", c.GetType(), c.GetStatus())
			if c.GetReason() != "" {
				s += "(" + c.GetReason() + ")"
			}
		}
		out = append(out, s)
	}
	return orNone(strings.Join(out, ","))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
