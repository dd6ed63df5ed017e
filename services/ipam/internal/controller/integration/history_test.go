package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/server"
)

// historyOf reads the history of ip through srv, as "action ns/name by how".
func historyOf(t *testing.T, ctx context.Context, srv *server.Server, req *ipamv1.AddressHistoryRequest) ([]string, error) {
	t.Helper()
	var out []string
	for {
		resp, err := srv.AddressHistory(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetEntries() {
			s := e.GetAction() + " " + e.GetService().GetNamespace() + "/" + e.GetService().GetName() + " by " + e.GetBy()
			if e.GetHow() != "" {
				s += " " + e.GetHow()
			}
			out = append(out, s)
		}
		if resp.GetNextPageToken() == "" {
			return out, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func (h *harness) expectHistory(srv *server.Server, ip string, want ...string) {
	h.t.Helper()
	testenv.Eventually(h.t, wait, func() error {
		got, err := historyOf(h.t, context.Background(), srv, &ipamv1.AddressHistoryRequest{Ip: ip, PageSize: 2})
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("history of %s:\n got %q\nwant %q", ip, got, want)
		}
		return nil
	})
}

// The history of one address across grant, keep, return (after an ipam
// restart), keep, take by another (after a leader failover), and of
// another address across an operator's reservation and its release; the
// same read on a standby; a tenant allowed in one namespace sees only its
// entries, and never another namespace's name.
func TestAddressHistory(t *testing.T) {
	h := newHarness(t)
	h.keepReleased = time.Hour
	pool := "thist-" + h.lease[len("ipam-"):]
	h.pool(pool, "10.83.1.0/31")
	ns := h.ns
	r := h.start("ipam-0")
	h.service("first", nil)
	h.expect(wait, map[string]string{"first": "10.83.1.0"})
	h.deleteService("first")
	h.expectKept(ns + "/first=10.83.1.0")

	// Across a restart.
	r = h.restart(r, "ipam-1")
	h.service("first", nil)
	h.expect(wait, map[string]string{"first": "10.83.1.0"})
	h.deleteService("first")
	h.expectKept(ns + "/first=10.83.1.0")

	// The operator reserves the other address: the pool has none free.
	if _, err := r.ctrl.Reserve(context.Background(), ledger.Reservation{IP: netip.MustParseAddr("10.83.1.1"), Note: "router", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// A leader failover: a standby takes over when the leader stops.
	standby := h.start("ipam-2")
	r.stop()
	h.waitForHolder("ipam-2")
	h.service("second", nil) // takes the address kept for first
	h.expect(wait, map[string]string{"second": "10.83.1.0"})
	if _, err := standby.ctrl.Unreserve(context.Background(), netip.MustParseAddr("10.83.1.1")); err != nil {
		t.Fatal(err)
	}

	srv := h.api(standby)
	h.expectHistory(srv, "10.83.1.0",
		"granted "+ns+"/first by ipam", "kept "+ns+"/first by ipam", "returned "+ns+"/first by ipam",
		"kept "+ns+"/first by ipam", "taken "+ns+"/second by ipam")
	h.expectHistory(srv, "10.83.1.1", "reserved / by unauthenticated", "unreserved / by unauthenticated")

	// A tenant allowed `get history` in another namespace only sees nothing
	// of this one, and is refused when it names it.
	env := h.env
	other := env.Namespace(t, nil)
	tok, err := env.GRPCToken(context.Background(), other, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	bindHistoryReader(t, h, other, "tenant")
	a := authz.New(env.Client, server.Rules(), slog.New(slog.DiscardHandler))
	a.SetAudiences(authz.ServerAudiences(authz.IPAMAudience)...)
	a.SetCacheTTLs(0, 0)
	tenantSrv, err := server.New(server.Config{Namespace: h.ledgerNS, LeaseName: h.lease, LBClass: h.class, Access: a}, standby.src.Store, env.Client, standby.ctrl, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	call := func() context.Context {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
		ctx, err := a.Authorize(ctx, "/ipledger.ipam.v1.IPAMService/AddressHistory")
		if err != nil {
			t.Fatal(err)
		}
		return ctx
	}
	testenv.Eventually(t, wait, func() error { // RBAC reaches the authorizer through an informer
		_, err := historyOf(t, call(), tenantSrv, &ipamv1.AddressHistoryRequest{Service: &ipamv1.ServiceRef{Namespace: other, Name: "x"}})
		return err
	})
	got, err := historyOf(t, call(), tenantSrv, &ipamv1.AddressHistoryRequest{})
	if err != nil || len(got) != 0 {
		t.Fatalf("tenant of %s reads %q (%v), want nothing", other, got, err)
	}
	_, err = historyOf(t, call(), tenantSrv, &ipamv1.AddressHistoryRequest{Service: &ipamv1.ServiceRef{Namespace: ns, Name: "first"}})
	if err == nil || !strings.Contains(err.Error(), "PermissionDenied") && !strings.Contains(err.Error(), "may not") {
		t.Fatalf("tenant naming %s: %v, want PermissionDenied", ns, err)
	}
	// Bound in this namespace too, it sees this namespace's entries, and
	// still not the reservation for no Service.
	bindHistoryReader(t, h, ns, "tenant", other)
	testenv.Eventually(t, wait, func() error {
		got, err := historyOf(t, call(), tenantSrv, &ipamv1.AddressHistoryRequest{})
		if err != nil {
			return err
		}
		if len(got) != 5 {
			return fmt.Errorf("tenant reads %q, want the 5 entries of %s", got, ns)
		}
		return nil
	})

	// A person of the aggregated API, scoped by authz.WithNamespaceAccess
	// (ipam's SubjectAccessReviews for the request's user), on a server
	// without the gRPC Authorizer: the same rule.
	person := func(allowed string) context.Context {
		return authz.WithNamespaceAccess(context.Background(), false, func(_ context.Context, n string) (bool, error) { return n == allowed, nil })
	}
	if got, err := historyOf(t, person(other), srv, &ipamv1.AddressHistoryRequest{}); err != nil || len(got) != 0 {
		t.Errorf("person of %s reads %q (%v), want nothing", other, got, err)
	}
	if _, err := historyOf(t, person(other), srv, &ipamv1.AddressHistoryRequest{Service: &ipamv1.ServiceRef{Namespace: ns, Name: "first"}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("person of %s naming %s: %v, want PermissionDenied", other, ns, err)
	}
	if got, err := historyOf(t, person(ns), srv, &ipamv1.AddressHistoryRequest{}); err != nil || len(got) != 5 {
		t.Errorf("person of %s reads %q (%v), want its 5 entries", ns, got, err)
	}
}

// bindHistoryReader lets ServiceAccount (saNamespace, default ns)/name
// get history.ipledger.io in namespace ns only.
func bindHistoryReader(t *testing.T, h *harness, ns, name string, saNamespace ...string) {
	t.Helper()
	sans := ns
	if len(saNamespace) > 0 {
		sans = saNamespace[0]
	}
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "history-reader", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{authz.Group}, Resources: []string{"history"}, Verbs: []string{"get"}}}}
	if _, err := h.env.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "history-reader", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "history-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: sans, Name: name}}}
	if _, err := h.env.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A ledger restored from a backup while ipam is stopped, as
// docs/kubectl-ipledger.md says (kubectl ipledger ledger backup, then
// ledger restore: the plugin an operator runs, writing over the ledger's
// ConfigMaps): the next term finds the restore's write and records, as
// restored, the changes of holder it made; then what ipam decides from the
// restored ledger and the statuses, as usual.
func TestAddressHistoryAcrossARestore(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("thist-restore-"+h.lease[len("ipam-"):], "10.83.2.0/32")
	ns := h.ns
	r := h.start("ipam-0")
	h.service("a", nil)
	h.expect(wait, map[string]string{"a": "10.83.2.0"})
	srv := h.api(r)
	h.expectHistory(srv, "10.83.2.0", "granted "+ns+"/a by ipam")
	plugin := func(args ...string) {
		t.Helper()
		cmd := exec.Command(h.env.Plugin(t), append([]string{"--kubeconfig", h.env.CP.KubeconfigPath, "--ipam-namespace", h.ledgerNS}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl ipledger %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	backup := filepath.Join(t.TempDir(), "ledger.yaml")
	plugin("ledger", "backup", "-f", backup)
	h.deleteService("a")
	h.service("b", nil)
	h.expect(wait, map[string]string{"b": "10.83.2.0"})
	h.expectHistory(srv, "10.83.2.0", "granted "+ns+"/a by ipam", "released "+ns+"/a by ipam", "granted "+ns+"/b by ipam")
	r.stop()
	plugin("ledger", "restore", "-f", backup)

	r = h.start("ipam-1")
	h.expect(wait, map[string]string{"b": "10.83.2.0"})
	srv = h.api(r)
	testenv.Eventually(t, wait, func() error {
		got, err := historyOf(t, ctx, srv, &ipamv1.AddressHistoryRequest{Ip: "10.83.2.0"})
		if err != nil {
			return err
		}
		want := []string{"granted " + ns + "/a by ipam", "released " + ns + "/a by ipam", "granted " + ns + "/b by ipam",
			"released " + ns + "/b by ipam restored", "granted " + ns + "/a by ipam restored"}
		if len(got) < len(want)+1 || !slices.Equal(got[:len(want)], want) || got[len(got)-1] != "granted "+ns+"/b by ipam" {
			return fmt.Errorf("history of 10.83.2.0:\n got %q\nwant %q, then what ipam decided, ending with b granted", got, want)
		}
		return nil
	})
}
