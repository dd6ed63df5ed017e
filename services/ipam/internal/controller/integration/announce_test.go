package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/convert"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/server"
)

const unannounced = "ipledger_ipam_addresses_unannounced"

// TestAnnouncedByMetalLB: with MetalLB's CRDs installed in the real API
// server while the watcher (a real binary) and ipam run, and the objects
// MetalLB's speaker writes, ExplainService says which node announces each
// address ipam gave and since when; an L2Advertisement deleted makes it
// "not announced" (naming the pool) and the leader's gauge counts it;
// restored, it is announced again; another node's ServiceL2Status in place
// of the first puts an AnnouncerChanged Event on the Service.
func TestAnnouncedByMetalLB(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	h := newHarness(t)
	r, srv := h.startWeb("tann", "10.78.61.0/28", "10.78.61.0")
	// The announcements are of the addresses the replica's stream shows
	// the Service holding: its status, written by ipam, comes back a moment
	// after startWeb saw it in the API.
	why := func() *ipamv1.Announcement {
		t.Helper()
		var a *ipamv1.Announcement
		testenv.Eventually(t, wait, func() error {
			x, err := srv.ExplainService(ctx, &ipamv1.ExplainServiceRequest{Service: &ipamv1.ServiceRef{Namespace: h.ns, Name: "web"}})
			if err != nil || len(x.GetAnnouncements()) != 1 {
				return fmt.Errorf("ExplainService = %v, %v; want one announcement", x, err)
			}
			a = x.GetAnnouncements()[0]
			return nil
		})
		return a
	}
	if a := why(); a.GetState() != "NoAnnouncer" || !strings.HasPrefix(a.GetMessage(), "no announcer found") {
		t.Errorf("before MetalLB: %v", a)
	}

	env.InstallMetalLB(t) // while the watcher and ipam run
	mlb := env.Namespace(t, nil)
	create := func(res, kind string, name string, spec map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "metallb.io/v1beta1", "kind": kind,
			"metadata": map[string]any{"namespace": mlb, "name": name}, "spec": spec}}
		if _, err := env.Dynamic.Resource(convert.MetalLBGroupVersion.WithResource(res)).Namespace(mlb).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// As the speaker writes it: labels naming the Service and node, the
	// rest in the status subresource.
	l2Status := func(name, node string) {
		t.Helper()
		res := env.Dynamic.Resource(convert.MetalLBServiceL2StatusResource).Namespace(mlb)
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status",
			"metadata": map[string]any{"namespace": mlb, "name": name, "labels": map[string]any{
				"metallb.io/node": node, "metallb.io/service-name": "web", "metallb.io/service-namespace": h.ns}}}}
		out, err := res.Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out.Object["status"] = map[string]any{"node": node, "serviceName": "web", "serviceNamespace": h.ns,
			"interfaces": []any{map[string]any{"name": "ipl-lan0"}}}
		if _, err := res.UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(state, node, message, metric string) {
		t.Helper()
		waitAnnouncement(t, srv, r, h.ns, "web", state, node, message, metric)
	}

	create("ipaddresspools", "IPAddressPool", "ipledger", map[string]any{"addresses": []any{"10.78.61.0/28"}, "autoAssign": false})
	create("l2advertisements", "L2Advertisement", "ipledger-lan", map[string]any{"ipAddressPools": []any{"ipledger"}})
	waitFor("NotAnnounced", "", "no speaker reports announcing it", "1")
	l2Status("l2-n1", "n1")
	waitFor("Announced", "n1", "announced by MetalLB L2 from node n1 since", "0")

	if err := env.Dynamic.Resource(convert.MetalLBL2AdvertisementResource).Namespace(mlb).Delete(ctx, "ipledger-lan", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("NotAnnounced", "", "no L2Advertisement or BGPAdvertisement in "+mlb+" covers MetalLB IPAddressPool ipledger", "1")
	create("l2advertisements", "L2Advertisement", "ipledger-lan", map[string]any{"ipAddressPools": []any{"ipledger"}})
	waitFor("Announced", "n1", "from node n1", "0")

	// A failover: the new node's speaker writes its status, the old one's
	// goes.
	l2Status("l2-n2", "n2")
	if err := env.Dynamic.Resource(convert.MetalLBServiceL2StatusResource).Namespace(mlb).Delete(ctx, "l2-n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("Announced", "n2", "from node n2", "0")
	testenv.Eventually(t, wait, func() error {
		evs, err := env.Client.CoreV1().Events(h.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "AnnouncerChanged").String()})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "web" && strings.Contains(e.Message, "announced by MetalLB L2 from node n2") && strings.Contains(e.Message, "(before: MetalLB L2 from node n1 since") {
				return nil
			}
		}
		return fmt.Errorf("no AnnouncerChanged Event naming n2 after n1 among %d", len(evs.Items))
	})

	// Without MetalLB's CRDs nothing is known of the address again, and
	// nothing is counted.
	env.UninstallMetalLB(t)
	waitFor("NoAnnouncer", "", "no announcer found", "0")
}

// TestAnnouncedByCilium: a Lease cilium-l2announce-<namespace>-<name> in
// kube-system (the watcher's default --cilium-namespace), as Cilium's L2
// announcer holds it, makes ExplainService say the Service's address is
// announced by Cilium from the holding node; one that lapses unrenewed —
// with no object changing at the moment it lapses — makes it "not
// announced", and the leader's gauge counts it.
func TestAnnouncedByCilium(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	h := newHarness(t)
	r, srv := h.startWeb("tcil", "10.78.62.0/28", "10.78.62.0")
	leases := env.Client.CoordinationV1().Leases(metav1.NamespaceSystem)
	name := "cilium-l2announce-" + h.ns + "-web"
	t.Cleanup(func() { leases.Delete(ctx, name, metav1.DeleteOptions{}) })
	holder, acquired := "n1", metav1.NewMicroTime(time.Now().Truncate(time.Second))
	hour := int32(3600)
	lease, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &hour, AcquireTime: &acquired, RenewTime: &acquired}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(state, node, message, metric string) {
		t.Helper()
		waitAnnouncement(t, srv, r, h.ns, "web", state, node, message, metric)
	}
	waitFor("Announced", "n1", "announced by Cilium L2 from node n1 since "+acquired.UTC().Format(time.RFC3339)+" (Lease kube-system/"+name+")", "0")

	// Renewed for two seconds only, then never again: it lapses with no
	// object changing, and the tracker decides again when it does.
	two := int32(2)
	renewed := metav1.NewMicroTime(time.Now())
	lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &two, &renewed
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("NotAnnounced", "", "not announced: Cilium's L2 announcement Lease kube-system/"+name+" has no live holder", "1")
}

// startWeb makes an IPPool of cidr and a Service web, starts ipam and waits
// until web holds ip; it returns the replica and its API.
func (h *harness) startWeb(pool, cidr, ip string) (*ipam, *server.Server) {
	h.t.Helper()
	h.pool(pool+"-"+h.lease, cidr)
	h.service("web", nil)
	r := h.start("ipam-0")
	h.expect(wait, map[string]string{"web": ip})
	return r, h.api(r)
}

// waitAnnouncement waits until ExplainService says of the one address of
// Service ns/name: state, by node, in words holding message; and the
// replica's ipledger_ipam_addresses_unannounced is metric.
func waitAnnouncement(t *testing.T, srv *server.Server, r *ipam, ns, name, state, node, message, metric string) {
	t.Helper()
	testenv.Eventually(t, wait, func() error {
		x, err := srv.ExplainService(context.Background(), &ipamv1.ExplainServiceRequest{Service: &ipamv1.ServiceRef{Namespace: ns, Name: name}})
		if err != nil || len(x.GetAnnouncements()) != 1 {
			return fmt.Errorf("ExplainService = %v, %v; want one announcement", x, err)
		}
		if a := x.GetAnnouncements()[0]; a.GetState() != state || a.GetNode() != node || !strings.Contains(a.GetMessage(), message) {
			return fmt.Errorf("announcement %v, want %s by %q saying %q", a, state, node, message)
		}
		return gaugeIs(r, metric)
	})
}

// gaugeIs checks the replica's ipledger_ipam_addresses_unannounced.
func gaugeIs(r *ipam, want string) error {
	mfs, err := r.reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		if mf.GetName() == unannounced {
			if got := fmt.Sprint(mf.GetMetric()[0].GetGauge().GetValue()); got != want {
				return fmt.Errorf("%s = %s, want %s", unannounced, got, want)
			}
			return nil
		}
	}
	return fmt.Errorf("%s not exported", unannounced)
}
