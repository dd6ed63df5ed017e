// Package integration runs ipam's aggregated API behind the real
// kube-apiserver of lab/testenv: people authenticated by client
// certificates (not ServiceAccounts, no tokens) read through `kubectl get`,
// authorized by the shipped ClusterRoles.
package integration

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/ipamapi"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/aggregated"
	"github.com/ipledger/ipledger/services/ipam/internal/server"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fakeIPAM answers as ipam would for two Services and one pool, and
// records reservations with the caller ipam would attribute them to
// (authz.UserFrom, what the controller's log, Events and history use). The
// aggregated server calls ipam's IPAMService implementation in process;
// what that answers is tested in services/ipam/internal/server, what is new
// here is the path through the aggregation layer.
type fakeIPAM struct {
	mu       sync.Mutex
	reserved map[string]*ipamv1.Reservation
	by       []string // "reserve IP by USER", "release IP by USER"
	// standbyAnswers: this many reservations are refused as a standby
	// would, before the "leader" answers.
	standbyAnswers int
}

type reads = *fakeIPAM

func (*fakeIPAM) ListAllocations(_ context.Context, req *ipamv1.ListAllocationsRequest) (*ipamv1.ListAllocationsResponse, error) {
	all := []*ipamv1.Allocation{ // in IP order, as ipam answers
		{Ip: "192.0.2.10", Pool: "blue", Service: &ipamv1.ServiceRef{Namespace: "shop", Name: "web"}, AllocatedAt: "2026-12-01T10:00:00Z"},
		{Ip: "192.0.2.11", Pool: "blue", Service: &ipamv1.ServiceRef{Namespace: "bank", Name: "api"}, KeptUntil: "2026-12-08T10:00:00Z"},
		{Ip: "192.0.2.12", Pool: "blue"}, // a reservation: not an allocation
		{Ip: "fd00::10", Pool: "blue6", Service: &ipamv1.ServiceRef{Namespace: "shop", Name: "web"}, AllocatedAt: "2026-12-01T10:00:00Z"},
	}
	var out []*ipamv1.Allocation
	for _, a := range all {
		if req.GetNamespace() == "" || a.GetService().GetNamespace() == req.GetNamespace() {
			out = append(out, a)
		}
	}
	return &ipamv1.ListAllocationsResponse{Allocations: out}, nil
}

func (*fakeIPAM) ListPools(context.Context, *ipamv1.ListPoolsRequest) (*ipamv1.ListPoolsResponse, error) {
	return &ipamv1.ListPoolsResponse{Pools: []*ipamv1.Pool{{
		Name: "blue", Addresses: []string{"192.0.2.0/24"}, AutoAssign: true,
		Ipv4:       &ipamv1.FamilyUsage{Total: "256", Used: "3", Held: "2", Available: "253"},
		Conditions: []*ipamv1.PoolCondition{{Type: "Ready", Status: "True"}},
	}}}, nil
}

func (*fakeIPAM) ExplainService(_ context.Context, req *ipamv1.ExplainServiceRequest) (*ipamv1.ExplainServiceResponse, error) {
	if req.GetService().GetName() != "web" {
		return nil, status.Errorf(codes.NotFound, "Service %s/%s not found", req.GetService().GetNamespace(), req.GetService().GetName())
	}
	return &ipamv1.ExplainServiceResponse{Decision: "Allocated", Ips: []string{"192.0.2.10"}}, nil
}

func (f *fakeIPAM) GetAllocation(_ context.Context, req *ipamv1.GetAllocationRequest) (*ipamv1.GetAllocationResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &ipamv1.GetAllocationResponse{Reservation: f.reserved[req.GetIp()]}, nil
}

func (f *fakeIPAM) caller(ctx context.Context) string {
	u, _ := authz.UserFrom(ctx)
	return u.Username
}

func (f *fakeIPAM) ReserveAddress(ctx context.Context, req *ipamv1.ReserveAddressRequest) (*ipamv1.ReserveAddressResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.standbyAnswers > 0 {
		f.standbyAnswers--
		return nil, status.Errorf(codes.FailedPrecondition, "%s; send reservations to the leader, \"ipam-0\"", server.NotLeaderMessage)
	}
	r := &ipamv1.Reservation{Ip: req.GetIp(), OwnerNote: req.GetOwnerNote(), CreatedAt: "2026-12-07T12:00:00Z"}
	f.reserved[req.GetIp()] = r
	f.by = append(f.by, "reserve "+req.GetIp()+" by "+f.caller(ctx))
	return &ipamv1.ReserveAddressResponse{Reservation: r}, nil
}

func (f *fakeIPAM) ReleaseReservation(ctx context.Context, req *ipamv1.ReleaseReservationRequest) (*ipamv1.ReleaseReservationResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.reserved[req.GetIp()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "ip: %s is not reserved", req.GetIp())
	}
	delete(f.reserved, req.GetIp())
	f.by = append(f.by, "release "+req.GetIp()+" by "+f.caller(ctx))
	return &ipamv1.ReleaseReservationResponse{Reservation: r}, nil
}

func (*fakeIPAM) PreviewPool(_ context.Context, req *ipamv1.PreviewPoolRequest) (*ipamv1.PreviewPoolResponse, error) {
	if !strings.Contains(string(req.GetManifest()), "kind: IPPool") {
		return nil, status.Error(codes.InvalidArgument, "manifest: kind: want IPPool")
	}
	return &ipamv1.PreviewPoolResponse{Pool: "green", Change: "Create",
		Allocated: []*ipamv1.ServicePreview{{Service: &ipamv1.ServiceRef{Namespace: "shop", Name: "pending"}, IpsAfter: []string{"198.51.100.1"}, ReasonAfter: "Allocated", PoolAfter: "green"}},
		Summary:   []string{"1 pending Service would get addresses"}}, nil
}

// AddressHistory answers as ipam's server does for a caller's scope
// (authz.AllowedEverywhere, authz.ContextAllowedIn: what the aggregated
// API set for the person): entries of shop, of bank, and of a reservation
// for no Service, only those of the namespaces the caller may read.
func (*fakeIPAM) AddressHistory(ctx context.Context, req *ipamv1.AddressHistoryRequest) (*ipamv1.AddressHistoryResponse, error) {
	all := []*ipamv1.HistoryEntry{
		{At: "2026-12-01T10:00:00Z", Ip: "192.0.2.10", Pool: "blue", Service: &ipamv1.ServiceRef{Namespace: "shop", Name: "web"}, Action: "granted", By: "ipam"},
		{At: "2026-12-01T11:00:00Z", Ip: "192.0.2.11", Pool: "blue", Service: &ipamv1.ServiceRef{Namespace: "bank", Name: "api"}, Action: "granted", By: "ipam"},
		{At: "2026-12-01T12:00:00Z", Ip: "192.0.2.12", Pool: "blue", Action: "reserved", By: "dave", Note: "router"},
	}
	resp := &ipamv1.AddressHistoryResponse{}
	for _, e := range all {
		ns := e.GetService().GetNamespace()
		if svc := req.GetService(); svc != nil && (svc.GetNamespace() != ns || svc.GetName() != e.GetService().GetName()) {
			continue
		}
		if req.GetIp() != "" && req.GetIp() != e.GetIp() {
			continue
		}
		if !authz.AllowedEverywhere(ctx) {
			ok, err := authz.ContextAllowedIn(ctx, ns)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

func (f *fakeIPAM) record() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.by)
}

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// serve starts the aggregated API and registers it with an APIService
// (behind an ExternalName Service: testenv's endpoints are on loopback,
// which EndpointSlices may not name), and waits until it is Available.
func serve(t testing.TB, env *testenv.Env) *fakeIPAM {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fake := &fakeIPAM{reserved: map[string]*ipamv1.Reservation{}}
	certFile, keyFile := testenv.SelfSignedCert(t, "ipledger-ipam-api."+testenv.SystemNamespace+".svc")
	srv, err := aggregated.New(aggregated.Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, Kubeconfig: env.CP.KubeconfigPath}, fake)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("aggregated server: %v", err)
		}
	})
	port := srv.Addr().(*net.TCPAddr).Port

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ipledger-ipam-api", Namespace: testenv.SystemNamespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}},
	}
	if _, err := env.Client.CoreV1().Services(svc.Namespace).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": ipamapi.Version + "." + ipamapi.Group},
		"spec": map[string]any{
			"group": ipamapi.Group, "version": ipamapi.Version,
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"caBundle": base64.StdEncoding.EncodeToString(ca),
			"service":  map[string]any{"name": svc.Name, "namespace": svc.Namespace, "port": int64(port)},
		},
	}}
	if _, err := env.Dynamic.Resource(apiServices).Create(context.Background(), apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(apiServices).Delete(context.Background(), apiService.GetName(), metav1.DeleteOptions{})
		_ = env.Client.CoreV1().Services(svc.Namespace).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	if _, err := env.Kubectl(context.Background(), "wait", "--for=condition=Available", "--timeout=60s", "apiservice/"+apiService.GetName()); err != nil {
		out, _ := env.Kubectl(context.Background(), "get", "apiservice", apiService.GetName(), "-o", "yaml")
		t.Fatalf("%v\n%s", err, out)
	}
	// kubectl validates what it creates against the OpenAPI the
	// kube-apiserver aggregates, which it fetches from the new server
	// a moment after the APIService is Available.
	testenv.Eventually(t, 30*time.Second, func() error {
		doc, err := env.Kubectl(context.Background(), "get", "--raw", "/openapi/v3/apis/"+ipamapi.Group+"/"+ipamapi.Version)
		if err != nil {
			return err
		}
		if !strings.Contains(string(doc), `"/apis/api.ipledger.io/v1alpha1/reservations"`) {
			return fmt.Errorf("the kube-apiserver's OpenAPI of %s/%s has no reservations yet", ipamapi.Group, ipamapi.Version)
		}
		return nil
	})
	return fake
}

// bind grants user the ClusterRole role.
func bind(t testing.TB, env *testenv.Env, user, role string) {
	t.Helper()
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
}

// kubectl runs the pinned kubectl with kubeconfig (a person's).
func kubectl(t *testing.T, env *testenv.Env, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.CP.BinDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPersonReadsAsThemselves: a person authenticated by a client
// certificate, with only the shipped ClusterRole ipledger:viewer, reads
// allocations, pools and an explanation through the kube-apiserver with
// plain kubectl and its output options; the kube-apiserver's audit log
// names the person.
func TestPersonReadsAsThemselves(t *testing.T) {
	env := testenv.Get(t)
	serve(t, env)
	bind(t, env, "alice", "ipledger:viewer")
	alice, err := env.CP.UserKubeconfig(t.TempDir(), "alice", "people")
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "allocations.api.ipledger.io", "-A", "-o", "jsonpath={range .items[*]}{.metadata.namespace}/{.service}={.ip} {end}"},
			"shop/web=192.0.2.10 bank/api=192.0.2.11 shop/web=fd00::10 "},
		{[]string{"get", "allocations.api.ipledger.io", "-n", "shop", "-o", "name"},
			"allocation.api.ipledger.io/web.192.0.2.10\nallocation.api.ipledger.io/web.fd00--10\n"},
		{[]string{"get", "allocations.api.ipledger.io", "-A", "-o", "custom-columns=IP:.ip,KEPT:.keptUntil", "--sort-by=.ip"},
			"IP           KEPT\n192.0.2.10   <none>\n192.0.2.11   2026-12-08T10:00:00Z\nfd00::10     <none>\n"},
		{[]string{"get", "pools.api.ipledger.io", "blue", "-o", "jsonpath={.ipv4.available}"}, "253"},
		{[]string{"get", "explanations.api.ipledger.io", "-n", "shop", "web", "-o", "jsonpath={.decision} {.ips}"}, `Allocated ["192.0.2.10"]`},
	} {
		out, err := kubectl(t, env, alice, tc.args...)
		if err != nil || out != tc.want {
			t.Errorf("kubectl %s:\n got %q (%v)\nwant %q", strings.Join(tc.args, " "), out, err, tc.want)
		}
	}
	// The default (table) output has ipam's columns.
	if out, err := kubectl(t, env, alice, "get", "allocations.api.ipledger.io", "-n", "bank"); err != nil ||
		!strings.Contains(out, "KEPT-UNTIL") || !strings.Contains(out, "api.192.0.2.11") || strings.Contains(out, "web") {
		t.Errorf("kubectl get allocations -n bank: %q (%v)", out, err)
	}
	// ipam's NotFound reaches the person.
	if out, err := kubectl(t, env, alice, "get", "explanations.api.ipledger.io", "-n", "shop", "gone"); err == nil || !strings.Contains(out, "Service shop/gone not found") {
		t.Errorf("explain a missing Service: %q (%v)", out, err)
	}

	// The kube-apiserver audited the read under alice's name.
	testenv.Eventually(t, 10*time.Second, func() error {
		events, err := env.CP.AuditEvents()
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(events, func(e controlplane.AuditEvent) bool {
			return e.User.Username == "alice" && e.Verb == "list" && e.ObjectRef != nil &&
				e.ObjectRef.APIGroup == ipamapi.Group && e.ObjectRef.Resource == "allocations" &&
				e.ResponseStatus != nil && e.ResponseStatus.Code == 200
		}) {
			return fmt.Errorf("no audit event of alice listing allocations.%s with 200 among %d events", ipamapi.Group, len(events))
		}
		return nil
	})
}

// TestRefusalNamesTheGrant: a person with no grant is refused by the
// kube-apiserver naming the resource; a person granted api.ipledger.io but
// not ipledger.io's virtual resource is refused by ipam naming the grant
// and the ClusterRole that has it.
func TestRefusalNamesTheGrant(t *testing.T) {
	env := testenv.Get(t)
	serve(t, env)
	bob, err := env.CP.UserKubeconfig(t.TempDir(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	out, err := kubectl(t, env, bob, "get", "allocations.api.ipledger.io", "-A")
	if err == nil || !strings.Contains(out, `User "bob" cannot list resource "allocations" in API group "api.ipledger.io"`) {
		t.Errorf("bob without grants: %q (%v)", out, err)
	}

	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-aggregated-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{ipamapi.Group}, Resources: []string{"allocations"}, Verbs: []string{"list"}}},
	}
	if _, err := env.Client.RbacV1().ClusterRoles().Create(context.Background(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	bind(t, env, "carol", role.Name)
	carol, err := env.CP.UserKubeconfig(t.TempDir(), "carol")
	if err != nil {
		t.Fatal(err)
	}
	out, err = kubectl(t, env, carol, "get", "allocations.api.ipledger.io", "-A")
	if err == nil || !strings.Contains(out, "ipam also needs list allocations.ipledger.io cluster-wide, which ClusterRole ipledger:viewer grants") {
		t.Errorf("carol with api.ipledger.io only: %q (%v)", out, err)
	}
}

// auditedBy waits for the audit log to show user's verb on
// reservations.api.ipledger.io/name answered with code.
func auditedBy(t *testing.T, env *testenv.Env, user, verb, name string, code int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		events, err := env.CP.AuditEvents()
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(events, func(e controlplane.AuditEvent) bool {
			return e.User.Username == user && e.Verb == verb && e.ObjectRef != nil && e.ObjectRef.APIGroup == ipamapi.Group &&
				e.ObjectRef.Resource == "reservations" && (name == "" || e.ObjectRef.Name == name) && e.ResponseStatus != nil && e.ResponseStatus.Code == code
		}) {
			return fmt.Errorf("no audit event of %s: %s reservations.%s/%s answered %d among %d events", user, verb, ipamapi.Group, name, code, len(events))
		}
		return nil
	})
}

// TestOperatorReservesAsThemselves: a person with the shipped ClusterRole
// ipledger:operator reserves and releases an address with kubectl create
// and delete; ipam is called as that person (what its log, Events and
// history record), and the audit log names them. A viewer is refused
// naming the grant. A standby's refusal makes kubectl retry until the
// leader answers.
func TestOperatorReservesAsThemselves(t *testing.T) {
	env := testenv.Get(t)
	fake := serve(t, env)
	bind(t, env, "dave", "ipledger:operator")
	bind(t, env, "erin", "ipledger:viewer")
	dir := t.TempDir()
	dave, err := env.CP.UserKubeconfig(dir, "dave", "netops")
	if err != nil {
		t.Fatal(err)
	}
	erin, err := env.CP.UserKubeconfig(dir, "erin")
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "reservation.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: api.ipledger.io/v1alpha1
kind: Reservation
metadata:
  name: 192.0.2.50
ownerNote: router VIP, ticket NET-7
`), 0o600); err != nil {
		t.Fatal(err)
	}

	out, err := kubectl(t, env, erin, "create", "-f", manifest)
	if err == nil || !strings.Contains(out, `User "erin" cannot create resource "reservations" in API group "api.ipledger.io"`) {
		t.Errorf("a viewer reserves: %q (%v)", out, err)
	}

	fake.mu.Lock()
	fake.standbyAnswers = 2
	fake.mu.Unlock()
	if out, err := kubectl(t, env, dave, "create", "-f", manifest, "-o", "name"); err != nil || out != "reservation.api.ipledger.io/192.0.2.50\n" {
		t.Fatalf("kubectl create reservation: %q (%v)", out, err)
	}
	if out, err := kubectl(t, env, dave, "get", "reservation.api.ipledger.io", "192.0.2.50", "-o", "jsonpath={.ownerNote}"); err != nil || out != "router VIP, ticket NET-7" {
		t.Errorf("kubectl get reservation: %q (%v)", out, err)
	}
	if out, err := kubectl(t, env, dave, "delete", "reservation.api.ipledger.io", "192.0.2.50"); err != nil || !strings.Contains(out, "deleted") {
		t.Errorf("kubectl delete reservation: %q (%v)", out, err)
	}
	if out, err := kubectl(t, env, dave, "delete", "reservation.api.ipledger.io", "192.0.2.50"); err == nil || !strings.Contains(out, "192.0.2.50 is not reserved") {
		t.Errorf("delete it again: %q (%v)", out, err)
	}
	if got, want := fake.record(), []string{"reserve 192.0.2.50 by dave", "release 192.0.2.50 by dave"}; !slices.Equal(got, want) {
		t.Errorf("ipam was called %q, want %q", got, want)
	}
	auditedBy(t, env, "dave", "create", "", 201)
	auditedBy(t, env, "dave", "delete", "192.0.2.50", 200)
}
