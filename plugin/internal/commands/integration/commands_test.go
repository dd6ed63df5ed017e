// Package integration runs kubectl-ipledger's commands against a real API
// server (lab/testenv) and the real ipam and watcher binaries: two ipam
// replicas, so reserve and release meet a leader and a standby. The plugin
// reaches them with --ipam-address: the test API server has no kubelet, so a
// port-forward cannot open here (test/cluster, on real nodes, is where the
// port-forward is proven); finding ipam's Pods and its leader is tested up to
// the port-forward.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/plugin/internal/commands"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	wait  = 90 * time.Second
	class = "test.ipledger.io/plugin"
	pool  = "plugin-a"
)

var poolGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}

// system is a watcher and two ipam replicas; ipam-a leads.
type system struct {
	env              *testenv.Env
	ns, ns2          string // the Services' namespaces
	leader, standby  string // gRPC addresses
	admin            string // kubeconfig
	viewer, operator string // --service-account of ServiceAccounts bound to ipledger:viewer / ipledger:operator
	nobody           string // a ServiceAccount bound to nothing
	// startIPAM starts another replica; grpcArgs replace --grpc-plaintext.
	startIPAM func(t *testing.T, id string, grpcArgs ...string) (grpcAddr string)
}

func startSystem(t *testing.T) *system {
	env := testenv.Get(t)
	ctx := context.Background()
	const sysNS = testenv.SystemNamespace
	s := &system{env: env, ns: env.Namespace(t, nil), ns2: env.Namespace(t, nil), admin: env.CP.KubeconfigPath}

	watcherAddr := testenv.FreeAddr(t)
	testenv.StartProcess(t, "watcher", env.Binary(t, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", watcherAddr, "--grpc-plaintext", "--namespace", sysNS,
		"--ops-addr", testenv.FreeAddr(t), "--log-format", "text")
	// ipam writes its ledger from a Pod only (the policy ipledger-ledger-writers).
	kubeconfig, tokenFile, bin := env.PodKubeconfig(t, sysNS, "ipledger-ipam"), env.TokenFile(t, sysNS, "ipledger-ipam"), env.Binary(t, "ipam")
	s.startIPAM = func(t *testing.T, id string, grpcArgs ...string) (grpcAddr string) {
		if len(grpcArgs) == 0 {
			grpcArgs = []string{"--grpc-plaintext"}
		}
		grpcAddr, ops := testenv.FreeAddr(t), testenv.FreeAddr(t)
		p := testenv.StartProcess(t, id, bin, nil, append([]string{
			"--kubeconfig", kubeconfig, "--namespace", sysNS, "--lb-class", class, "--log-format", "text",
			"--watcher-addr", watcherAddr, "--watcher-token-file", tokenFile, "--watcher-plaintext",
			"--grpc-addr", grpcAddr, "--ops-addr", ops,
			"--leader-elect-identity", id, "--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s",
			"--leader-elect-retry-period", "500ms"}, grpcArgs...)...)
		testenv.Eventually(t, wait, func() error {
			if p.Exited() {
				t.Fatalf("%s exited: %v\n%s", id, p.Err(), p.Logs())
			}
			resp, err := http.Get("http://" + ops + "/readyz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s /readyz: %s", id, resp.Status)
			}
			return nil
		})
		return grpcAddr
	}
	s.leader = s.startIPAM(t, "ipam-a")
	testenv.Eventually(t, wait, func() error {
		lease, err := env.Client.CoordinationV1().Leases(sysNS).Get(ctx, "ipledger-ipam", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := lease.Spec.HolderIdentity; h == nil || *h != "ipam-a" {
			return fmt.Errorf("lease holder %v, want ipam-a", h)
		}
		return nil
	})
	s.standby = s.startIPAM(t, "ipam-b")

	s.viewer = s.serviceAccount(t, "plugin-viewer", "ipledger:viewer")
	s.operator = s.serviceAccount(t, "plugin-operator", "ipledger:operator")
	s.nobody = s.serviceAccount(t, "plugin-nobody", "")

	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": pool},
		"spec":     map[string]any{"addresses": []any{"10.91.0.0/29"}},
	}}
	if _, err := env.Dynamic.Resource(poolGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(poolGVR).Delete(ctx, pool, metav1.DeleteOptions{})
		_, _ = env.Dynamic.Resource(poolGVR).Patch(ctx, pool, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	for _, svc := range []struct{ ns, name string }{{s.ns, "api"}, {s.ns, "db"}, {s.ns, "web"}, {s.ns2, "other"}} {
		s.loadBalancer(t, svc.ns, svc.name)
	}
	// The next test's system starts with the same pool and class: leave it
	// no Services (the test API server has no namespace controller).
	t.Cleanup(func() {
		for _, ns := range []string{s.ns, s.ns2} {
			list, err := env.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Error(err)
				continue
			}
			for _, svc := range list.Items {
				_ = env.Client.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{})
			}
		}
	})
	if _, err := env.Client.CoreV1().Services(s.ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "internal"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, wait, func() error {
		for _, ns := range []string{s.ns, s.ns2} {
			list, err := env.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, svc := range list.Items {
				if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && len(svc.Status.LoadBalancer.Ingress) == 0 {
					return fmt.Errorf("Service %s/%s has no IP yet", ns, svc.Name)
				}
			}
		}
		return nil
	})
	return s
}

func (s *system) loadBalancer(t *testing.T, ns, name string) {
	t.Helper()
	c := class
	_, err := s.env.Client.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &c, AllocateLoadBalancerNodePorts: new(false),
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// serviceAccount creates ipledger-system/name, binds it to role (none when
// empty) and returns it as --service-account takes it.
func (s *system) serviceAccount(t *testing.T, name, role string) string {
	t.Helper()
	ctx := context.Background()
	_, err := s.env.Client.CoreV1().ServiceAccounts(testenv.SystemNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if role != "" {
		_, err = s.env.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: testenv.SystemNamespace}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	return testenv.SystemNamespace + "/" + name
}

// run runs `kubectl ipledger args...` in-process, as main does, with the
// admin kubeconfig unless args name another.
func (s *system) run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := commands.NewRoot(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	if !hasFlag(args, "--kubeconfig") {
		args = append(args, "--kubeconfig", s.admin)
	}
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// ok runs the command and fails the test if it fails.
func (s *system) ok(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := s.run(t, args...)
	if err != nil {
		t.Fatalf("kubectl ipledger %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// fails runs the command, wants it to fail, and returns the error's text.
func (s *system) fails(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := s.run(t, args...)
	if err == nil {
		t.Fatalf("kubectl ipledger %s succeeded, want an error; printed:\n%s", strings.Join(args, " "), out)
	}
	return err.Error()
}

func wantAll(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// fields splits a printed table into rows of whitespace-separated cells.
func fields(table string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

func TestCommandsAgainstIPAM(t *testing.T) {
	s := startSystem(t)
	read := func(args ...string) []string {
		return append(args, "--ipam-address", s.standby, "--service-account", s.viewer)
	}

	t.Run("pools", func(t *testing.T) {
		// The leader writes the pool's Ready condition after the Services'
		// statuses: poll for it.
		want := "NAME IPV4 IPV6 HELD OUTSIDE KEPT AUTO ASSIGN READY REASON\n" + pool + " 4/8 <none> 0 0 true True Serving"
		testenv.Eventually(t, wait, func() error {
			var lines []string
			for _, row := range fields(s.ok(t, read("pools")...)) {
				lines = append(lines, strings.Join(row, " "))
			}
			if got := strings.Join(lines, "\n"); got != want {
				return fmt.Errorf("pools printed\n%s\nwant\n%s", got, want)
			}
			return nil
		})
		wide := s.ok(t, read("pools", "-o", "wide")...)
		wantAll(t, "pools -o wide", wide, "IPV4 HELD", "IPV4 AVAILABLE", "PRIORITY", "ADDRESSES", "MESSAGE", "10.91.0.0/29", "The pool serves Services")
		var resp ipamv1.ListPoolsResponse
		if err := protojson.Unmarshal([]byte(s.ok(t, read("pools", "-o", "json")...)), &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.Pools) != 1 || resp.Pools[0].GetIpv4().GetUsed() != "4" || resp.Pools[0].GetIpv4().GetHeld() != "4" || resp.Pools[0].GetIpv4().GetAvailable() != "4" {
			t.Errorf("pools -o json: %v", &resp)
		}
		wantAll(t, "pools -o yaml", s.ok(t, read("pools", "-o", "yaml")...), "name: "+pool, "used: \"4\"")
	})

	// The MetalLB objects covering the pool, applied to the API server
	// with MetalLB's CRDs installed: valid as MetalLB's schema has them.
	t.Run("announce metallb", func(t *testing.T) {
		out := s.ok(t, read("announce", "metallb", "--metallb-namespace", s.ns, "--interfaces", "eth1")...)
		wantAll(t, "announce metallb", out, "kind: IPAddressPool", "name: "+pool, "- 10.91.0.0/29", "autoAssign: false", "kind: L2Advertisement", "- eth1")
		s.env.InstallMetalLB(t)
		file := filepath.Join(t.TempDir(), "metallb.yaml")
		if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := s.env.Kubectl(context.Background(), "apply", "--server-side", "-f", file); err != nil ||
			!strings.Contains(string(got), "ipaddresspool.metallb.io/"+pool+" serverside-applied") || !strings.Contains(string(got), "l2advertisement.metallb.io/ipledger serverside-applied") {
			t.Fatalf("kubectl apply of announce metallb's output: %v\n%s", err, got)
		}
	})

	// The Cilium policy announcing the pool, applied to the API server with
	// Cilium's CiliumL2AnnouncementPolicy CRD installed: valid as Cilium's
	// schema has it.
	t.Run("announce cilium", func(t *testing.T) {
		out := s.ok(t, read("announce", "cilium", "--interfaces", "^eth1$", "--node-selector", "!node-role.kubernetes.io/control-plane")...)
		wantAll(t, "announce cilium", out, "kind: CiliumL2AnnouncementPolicy", "#   "+pool+": 10.91.0.0/29", "loadBalancerIPs: true", "externalIPs: false",
			"- ^eth1$", "operator: DoesNotExist")
		ctx := context.Background()
		if got, err := s.env.Kubectl(ctx, "apply", "--server-side", "-f", "../../cilium/testdata/crds/cilium.io_ciliuml2announcementpolicies.yaml"); err != nil {
			t.Fatalf("install Cilium's CRD: %v\n%s", err, got)
		}
		if got, err := s.env.Kubectl(ctx, "wait", "--for", "condition=established", "crd/ciliuml2announcementpolicies.cilium.io"); err != nil {
			t.Fatalf("Cilium's CRD: %v\n%s", err, got)
		}
		file := filepath.Join(t.TempDir(), "cilium.yaml")
		if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = s.env.Kubectl(ctx, "delete", "--ignore-not-found", "-f", file) })
		testenv.Eventually(t, wait, func() error { // until discovery serves the new kind
			got, err := s.env.Kubectl(ctx, "apply", "--server-side", "-f", file)
			if err != nil || !strings.Contains(string(got), "ciliuml2announcementpolicy.cilium.io/ipledger serverside-applied") {
				return fmt.Errorf("kubectl apply of announce cilium's output: %v\n%s", err, got)
			}
			return nil
		})
	})

	t.Run("allocations", func(t *testing.T) {
		rows := fields(s.ok(t, read("allocations", "-n", s.ns)...))
		if len(rows) != 4 || strings.Join(rows[0], " ") != "SERVICE IP POOL STATE" {
			t.Fatalf("allocations -n %s:\n%v", s.ns, rows)
		}
		for _, r := range rows[1:] {
			if len(r) != 4 || !strings.HasPrefix(r[1], "10.91.0.") || r[2] != pool || r[3] != "Held" {
				t.Errorf("allocations row %v", r)
			}
		}
		all := fields(s.ok(t, read("allocations", "-A")...))
		if len(all) != 5 || all[0][0] != "NAMESPACE" {
			t.Fatalf("allocations -A:\n%v", all)
		}
		wantAll(t, "allocations -A", s.ok(t, read("allocations", "-A")...), s.ns2+" ", "other")
		wantAll(t, "allocations -o wide", s.ok(t, read("allocations", "-n", s.ns, "-o", "wide")...), "SHARING KEY", "ALLOCATED", "UID")

		// One per page: the plugin follows next_page_token to the end.
		var resp ipamv1.ListAllocationsResponse
		if err := protojson.Unmarshal([]byte(s.ok(t, read("allocations", "-A", "--pool", pool, "--page-size", "1", "-o", "json")...)), &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.Allocations) != 4 {
			t.Errorf("allocations -A --page-size 1 -o json: %d allocations, want 4", len(resp.Allocations))
		}
		_, stderr, err := s.run(t, read("allocations", "--pool", "no-such-pool", "-A")...)
		if err != nil || !strings.Contains(stderr, "No allocations found.") {
			t.Errorf("allocations of an unknown pool: err %v, stderr %q", err, stderr)
		}
	})

	t.Run("why", func(t *testing.T) {
		out := s.ok(t, read("why", "svc/web", "-n", s.ns)...)
		wantAll(t, "why svc/web", out, "Service:   "+s.ns+"/web\n", "Decision:  The Service holds 10.91.0.", "Reason:    Allocated\n",
			"IPs:       10.91.0.", "Pools:\n  "+pool+"  eligible  Selected  the Service holds 10.91.0.")
		wantAll(t, "why svc/internal", s.ok(t, read("why", "svc/internal", "-n", s.ns)...), "ipam does not serve this Service")
		wantAll(t, "why -o yaml", s.ok(t, read("why", "svc/web", "-n", s.ns, "-o", "yaml")...), "decision:", "verdicts:", "pool: "+pool)
		wantAll(t, "why of a missing Service", s.fails(t, read("why", "svc/missing", "-n", s.ns)...), "does not exist")
		wantAll(t, "why deployment/x", s.fails(t, read("why", "deployment/x")...), "why explains Services")
	})

	t.Run("reserve and release go to the leader", func(t *testing.T) {
		write := func(args ...string) []string {
			return append(args, "--ipam-address", s.leader, "--service-account", s.operator)
		}
		// An address of the pool no Service holds: which ones the four
		// Services got is the allocator's choice.
		held := map[string]bool{}
		for _, ns := range []string{s.ns, s.ns2} {
			list, err := s.env.Client.CoreV1().Services(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, svc := range list.Items {
				for _, in := range svc.Status.LoadBalancer.Ingress {
					held[in.IP] = true
				}
			}
		}
		ip := ""
		for i := 7; i >= 0 && ip == ""; i-- {
			if a := fmt.Sprintf("10.91.0.%d", i); !held[a] {
				ip = a
			}
		}
		if out := s.ok(t, write("reserve", ip, "--note", "edge router")...); out != "reserved "+ip+" (edge router)\n" {
			t.Errorf("reserve printed %q", out)
		}
		if out := s.ok(t, write("release", ip)...); out != "released "+ip+" (edge router)\n" {
			t.Errorf("release printed %q", out)
		}
		wantAll(t, "release again", s.fails(t, write("release", ip)...), ip+" is not reserved")
		wantAll(t, "reserve without --note", s.fails(t, write("reserve", ip)...), `"note" not set`)
	})

	t.Run("a deleted Service's address is kept until released", func(t *testing.T) {
		var list ipamv1.ListAllocationsResponse
		if err := protojson.Unmarshal([]byte(s.ok(t, read("allocations", "-n", s.ns, "-o", "json")...)), &list); err != nil {
			t.Fatal(err)
		}
		ip := ""
		for _, a := range list.GetAllocations() {
			if a.GetService().GetName() == "db" {
				ip = a.GetIp()
			}
		}
		if ip == "" {
			t.Fatalf("db holds no address: %v", &list)
		}
		if err := s.env.Client.CoreV1().Services(s.ns).Delete(context.Background(), "db", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// kept is the KEPT cell of the pool's row, and the row of db.
		kept := func() (string, []string) {
			var keptCell string
			for _, row := range fields(s.ok(t, read("pools")...)) {
				if row[0] == pool {
					keptCell = row[4]
				}
			}
			for _, row := range fields(s.ok(t, read("allocations", "-n", s.ns)...)) {
				if row[0] == "db" {
					return keptCell, row
				}
			}
			return keptCell, nil
		}
		testenv.Eventually(t, wait, func() error {
			n, row := kept()
			if n != "1" || len(row) != 6 || row[1] != ip || row[2] != pool || row[3] != "Kept" || row[4] != "until" {
				return fmt.Errorf("pools KEPT %s, db's row %v; want 1 and db %s %s Kept until T", n, row, ip, pool)
			}
			return nil
		})
		wantAll(t, "allocations -o yaml", s.ok(t, read("allocations", "-n", s.ns, "-o", "yaml")...), "keptUntil:")
		write := func(args ...string) []string {
			return append(args, "--ipam-address", s.leader, "--service-account", s.operator)
		}
		if out, want := s.ok(t, write("release", ip)...), "released "+ip+" (kept for "+s.ns+"/db; it is free now)\n"; out != want {
			t.Errorf("release of the kept address printed %q, want %q", out, want)
		}
		testenv.Eventually(t, wait, func() error {
			if n, row := kept(); n != "0" || row != nil {
				return fmt.Errorf("after release: pools KEPT %s, db's row %v; want 0 and none", n, row)
			}
			return nil
		})
	})

	t.Run("a standby names the leader", func(t *testing.T) {
		msg := s.fails(t, "reserve", "10.91.0.6", "--note", "x", "--ipam-address", s.standby, "--service-account", s.operator)
		wantAll(t, "reserve on a standby", msg, "ipam at "+s.standby+" is a standby", `"ipam-a"`, "drop --ipam-address")
	})

	t.Run("no permission names the ClusterRole", func(t *testing.T) {
		msg := s.fails(t, "pools", "--ipam-address", s.standby, "--service-account", s.nobody)
		wantAll(t, "pools as nobody", msg, "no permission", "plugin-nobody", "--clusterrole=ipledger:viewer")
		msg = s.fails(t, "reserve", "10.91.0.6", "--note", "x", "--ipam-address", s.leader, "--service-account", s.viewer)
		wantAll(t, "reserve as a viewer", msg, "no permission", "--clusterrole=ipledger:operator")
	})

	t.Run("a token for the Kubernetes API is refused", func(t *testing.T) {
		token, err := s.env.ServiceAccountToken(context.Background(), testenv.SystemNamespace, "plugin-viewer")
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		wantAll(t, "pools with an API token", s.fails(t, "pools", "--ipam-address", s.standby, "--token-file", file), "ipam refused the token", "--service-account")
	})

	t.Run("--ipam-address and --token-file need no kubeconfig", func(t *testing.T) {
		token := s.env.TokenFile(t, testenv.SystemNamespace, "plugin-viewer")
		none := filepath.Join(t.TempDir(), "no-kubeconfig")
		wantAll(t, "pools without a kubeconfig", s.ok(t, "pools", "--ipam-address", s.standby, "--token-file", token, "--kubeconfig", none), pool+" ")
	})

	t.Run("the caller's own ServiceAccount", func(t *testing.T) {
		// A kubeconfig that is ServiceAccount plugin-operator, allowed to
		// request tokens for itself only.
		ctx := context.Background()
		name := "plugin-operator-self-token"
		_, err := s.env.Client.RbacV1().Roles(testenv.SystemNamespace).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{"plugin-operator"}}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		_, err = s.env.Client.RbacV1().RoleBindings(testenv.SystemNamespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "plugin-operator", Namespace: testenv.SystemNamespace}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		kubeconfig := s.env.ServiceAccountKubeconfig(t, testenv.SystemNamespace, "plugin-operator")
		testenv.Eventually(t, wait, func() error { // RBAC reaches the authorizer asynchronously
			_, stderr, err := s.run(t, "pools", "--ipam-address", s.standby, "--kubeconfig", kubeconfig)
			if err != nil {
				return fmt.Errorf("%v (%s)", err, stderr)
			}
			return nil
		})
		// The admin's kubeconfig is a user, not a ServiceAccount.
		wantAll(t, "pools as admin without --service-account", s.fails(t, "pools", "--ipam-address", s.standby),
			"only ServiceAccount tokens", "--service-account NAMESPACE/NAME")
		wantAll(t, "a missing ServiceAccount", s.fails(t, "pools", "--ipam-address", s.standby, "--service-account", "nope"),
			"ServiceAccount ipledger-system/nope does not exist", "create serviceaccount nope")
	})

	t.Run("TLS, as components/tls serves it", func(t *testing.T) {
		const name = "ipledger-ipam.ipledger-system.svc"
		cert, key := testenv.SelfSignedCert(t, name)
		addr := s.startIPAM(t, "ipam-tls", "--grpc-tls-cert-file", cert, "--grpc-tls-key-file", key)
		wantAll(t, "pools over TLS", s.ok(t, "pools", "--ipam-address", addr, "--service-account", s.viewer, "--ipam-ca-file", cert, "--ipam-tls-server-name", name), pool+" ")
		wantAll(t, "pools in plaintext to TLS", s.fails(t, "pools", "--ipam-address", addr, "--service-account", s.viewer, "--timeout", "5s"),
			"ipam unreachable", "--ipam-ca-file when ipam serves TLS")
		wantAll(t, "pools to a certificate without the address's name", s.fails(t, "pools", "--ipam-address", addr, "--service-account", s.viewer, "--ipam-ca-file", cert, "--timeout", "5s"),
			"ipam unreachable", "certificate")
	})

	t.Run("unreachable", func(t *testing.T) {
		msg := s.fails(t, "pools", "--ipam-address", testenv.FreeAddr(t), "--service-account", s.viewer, "--timeout", "5s")
		wantAll(t, "pools of nothing", msg, "ipam unreachable", "--ipam-address is right")
	})
}

// Without --ipam-address the plugin looks for ipam's Pods in
// --ipam-namespace: it says where they are when they are elsewhere, and
// sends reserve to the Lease holder (the port-forward then fails here, with
// no kubelet, naming the Pod it chose). A user bound only to
// ipledger:kubectl-plugin (deploy/kustomize/base/rbac) gets that far; one
// without it is told to bind it.
func TestFindsIPAMAndItsLeader(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	s := &system{env: env, admin: env.CP.KubeconfigPath}
	viewer := s.serviceAccount(t, "find-viewer", "ipledger:viewer")
	empty := env.Namespace(t, nil)

	wantAll(t, "no ipam anywhere", s.fails(t, "pools", "--ipam-namespace", empty, "--service-account", viewer),
		"no ipam found", "in namespace "+empty, "is ipledger installed")

	home := env.Namespace(t, nil)
	if _, err := env.Client.CoreV1().ServiceAccounts(home).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, name := range []string{"ipam-x", "ipam-y", "ipam-z"} {
		pod, err := env.Client.CoreV1().Pods(home).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "ipledger-ipam"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ipam", Image: "ipledger/ipam",
				Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 9443}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if name == "ipam-z" {
			continue // stays Pending
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if _, err := env.Client.CoreV1().Pods(home).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	holder := "ipam-y"
	if _, err := env.Client.CoordinationV1().Leases(home).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "ipledger-ipam"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantAll(t, "ipam elsewhere", s.fails(t, "pools", "--ipam-namespace", empty, "--service-account", viewer),
		"no ipam found", "but in "+home, "--ipam-namespace "+home)

	// From here on as ServiceAccount finder, with a token file: only the
	// Kubernetes API's permissions are in question.
	s.serviceAccount(t, "finder", "")
	as := []string{"--ipam-namespace", home, "--token-file", env.TokenFile(t, testenv.SystemNamespace, "finder"),
		"--kubeconfig", env.ServiceAccountKubeconfig(t, testenv.SystemNamespace, "finder")}
	wantAll(t, "finding without ipledger:kubectl-plugin", s.fails(t, append([]string{"pools"}, as...)...),
		"forbidden", "fix: bind the ClusterRole ipledger:kubectl-plugin in "+home)
	if _, err := env.Client.RbacV1().RoleBindings(home).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "finder"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipledger:kubectl-plugin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "finder", Namespace: testenv.SystemNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, wait, func() error { // RBAC reaches the authorizer asynchronously
		_, _, err := s.run(t, append([]string{"pools"}, as...)...)
		if err == nil || !strings.Contains(err.Error(), "port-forward to ipam Pod "+home+"/ipam-x port 9443") {
			return fmt.Errorf("pools as finder: %v", err)
		}
		return nil
	})
	for _, msg := range []string{
		s.fails(t, append([]string{"pools"}, as...)...),
		s.fails(t, append([]string{"reserve", "10.0.0.1", "--note", "x"}, as...)...),
	} {
		// The API server refuses the port-forward for the Pod, not the user.
		if strings.Contains(msg, "forbidden") {
			t.Errorf("ipledger:kubectl-plugin lacks a permission: %s", msg)
		}
	}
	wantAll(t, "writes go to the leader", s.fails(t, append([]string{"reserve", "10.0.0.1", "--note", "x"}, as...)...),
		"port-forward to ipam Pod "+home+"/ipam-y port 9443")

	holder = "ipam-z"
	if _, err := env.Client.CoordinationV1().Leases(home).Update(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "ipledger-ipam", ResourceVersion: leaseVersion(t, s, home)}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantAll(t, "a leader that is not Ready", s.fails(t, append([]string{"release", "10.0.0.1"}, as...)...),
		"the ipam leader ipam-z (holder of Lease "+home+"/ipledger-ipam) is not Ready")
}

func leaseVersion(t *testing.T, s *system, ns string) string {
	t.Helper()
	l, err := s.env.Client.CoordinationV1().Leases(ns).Get(context.Background(), "ipledger-ipam", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.ResourceVersion
}
