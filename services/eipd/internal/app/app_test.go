package app_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/faultproxy"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/pkg/grpcserver"
	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
	eipdv1 "github.com/ipledger/ipledger/proto/ipledger/eipd/v1"
	eipdv1grpc "github.com/ipledger/ipledger/proto/ipledger/eipd/v1/eipdv1grpc"
	"github.com/ipledger/ipledger/services/eipd/internal/app"
	"github.com/ipledger/ipledger/services/eipd/internal/awsec2"
	"github.com/ipledger/ipledger/services/eipd/internal/controller"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// TestMain runs moto_server (it dies with the test binary through
// Pdeathsig, since testenv.Main exits the process) and a real API server.
// The tests of this package run one at a time: every replica sees every
// Node of the API server.
func TestMain(m *testing.M) { ec2test.MainWithKubernetes(m) }

const system = testenv.SystemNamespace

// startWatcher runs the real watcher binary with its own ServiceAccount
// for the test.
func startWatcher(t testing.TB, env *testenv.Env) string {
	t.Helper()
	token, err := env.ServiceAccountToken(context.Background(), system, "ipledger-watcher")
	if err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	testenv.StartProcess(t, "watcher", env.Binary(t, "watcher"), nil,
		"--kubeconfig", env.KubeconfigFor(t, token),
		"--grpc-addr", addr, "--grpc-plaintext",
		"--ops-addr", testenv.FreeAddr(t),
		"--log-format", "text")
	return addr
}

type replica struct {
	*app.App
	name   string
	proxy  *faultproxy.Proxy
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

type replicaOpts struct {
	cluster, lease string
	prevent        bool
	minInterval    time.Duration
	requeue        time.Duration // sweep interval; 0 = the default
	reservedSets   string        // --reserved-sets file; "" = none
	stopTimeout    time.Duration // the term's drain bound; 0 = 20s
}

// startReplica runs one in-process ipledger-eipd, authenticated as its own
// ServiceAccount to the API server and the watcher, talking to moto through
// a fault proxy of its own (so the proxy counts this replica's calls).
func startReplica(t testing.TB, env *testenv.Env, watcher, name string, o replicaOpts) *replica {
	t.Helper()
	moto := ec2test.Get(t)
	proxy, err := faultproxy.Start(moto.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	tokenFile := env.TokenFile(t, system, "ipledger-eipd")
	env.GrantLease(t, system, "ipledger-eipd", o.lease)
	var cfg app.Config
	cfg.Defaults()
	cfg.Common = cmdmain.Common{Kubeconfig: env.ServiceAccountKubeconfig(t, system, "ipledger-eipd"), LogLevel: "debug", LogFormat: "text", Namespace: system}
	cfg.Stream = stream.Config{Target: watcher, TokenFile: tokenFile, Plaintext: true}
	cfg.Leader = leader.Config{
		LeaseName: o.lease, LeaseNamespace: system, Identity: name,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
		StopTimeout: cmp.Or(o.stopTimeout, 20*time.Second),
	}
	cfg.Controller.MinReconciliationInterval = o.minInterval
	if o.requeue > 0 {
		cfg.Controller.RequeueInterval = o.requeue
	}
	cfg.Controller.PendingPoll = 200 * time.Millisecond
	cfg.Controller.ConsistencyTimeout = 30 * time.Second
	cfg.Controller.PreventEIPDeallocation = o.prevent
	cfg.Controller.ReservedSets = o.reservedSets
	cfg.EC2 = awsec2.Config{MaxAttempts: 4, MaxBackoff: 200 * time.Millisecond, CallTimeout: 20 * time.Second}
	cfg.GRPC = grpcserver.Config{Addr: "127.0.0.1:0", Plaintext: true}
	cfg.ClusterID = o.cluster
	cfg.EC2Options = []func(*ec2.Options){func(eo *ec2.Options) { eo.BaseEndpoint = aws.String(proxy.URL()) }}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &replica{App: a, name: name, proxy: proxy, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

// stop ends the replica the way SIGTERM does and waits for Run to return.
func (r *replica) stop() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
	})
}

func names(t testing.TB) (cluster, lease, prefix string) {
	base := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(base) > 40 {
		base = base[:40]
	}
	return ec2test.ClusterID(t), "eipd-" + base, base
}

// createNode creates a Node the operator opted in, backed by inst, which
// is tagged here as an instance of cluster; the Node reports inst's private
// IP as its InternalIP.
func createNode(t testing.TB, env *testenv.Env, cluster, name string, inst ec2test.Instance) {
	t.Helper()
	ec2test.Get(t).TagForCluster(t, cluster, inst)
	_, err := env.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{controller.LabelOptIn: "true"}},
		Spec:       corev1.NodeSpec{ProviderID: inst.ProviderID()},
		Status:     corev1.NodeStatus{Addresses: inst.NodeAddresses()},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	t.Cleanup(func() { deleteNode(t, env, name) })
}

func deleteNode(t testing.TB, env *testenv.Env, name string) {
	_ = env.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
}

func addressesFor(t testing.TB, cluster, node string) []string {
	var out []string
	for _, a := range ec2test.Get(t).Addresses(t, cluster) {
		if ec2test.Tag(a.Tags, decide.TagNode) == node {
			out = append(out, aws.ToString(a.AllocationId))
		}
	}
	return out
}

// waitAssigned waits for the Node's label to name an address moto shows
// tagged for it and associated with inst's primary interface.
func waitAssigned(t testing.TB, env *testenv.Env, cluster, node string, inst ec2test.Instance, timeout time.Duration) string {
	t.Helper()
	var alloc string
	testenv.Eventually(t, timeout, func() error {
		n, err := env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ip := n.Labels[controller.LabelExternalIP]
		if ip == "" {
			return fmt.Errorf("node %s not labelled yet", node)
		}
		var mine []string
		for _, a := range ec2test.Get(t).Addresses(t, cluster) {
			if ec2test.Tag(a.Tags, decide.TagNode) != node {
				continue
			}
			mine = append(mine, aws.ToString(a.AllocationId))
			if aws.ToString(a.PublicIp) != ip || aws.ToString(a.NetworkInterfaceId) != inst.NetworkInterfaceID || aws.ToString(a.PrivateIpAddress) != inst.PrivateIP {
				return fmt.Errorf("address %s (%s) on %q/%q; node label %s, want %s/%s", aws.ToString(a.AllocationId), aws.ToString(a.PublicIp),
					aws.ToString(a.NetworkInterfaceId), aws.ToString(a.PrivateIpAddress), ip, inst.NetworkInterfaceID, inst.PrivateIP)
			}
		}
		if len(mine) != 1 {
			return fmt.Errorf("%d addresses tagged for %s, want 1", len(mine), node)
		}
		alloc = mine[0]
		return nil
	})
	return alloc
}

func TestLabelledNodeEndToEnd(t *testing.T) {
	env := testenv.Get(t)
	cluster, lease, prefix := names(t)
	r := startReplica(t, env, startWatcher(t, env), "solo", replicaOpts{cluster: cluster, lease: lease, minInterval: time.Second})
	moto := ec2test.Get(t)
	inst := moto.RunInstance(t)
	node := prefix + "-n1"
	start := time.Now()
	createNode(t, env, cluster, node, inst)
	alloc := waitAssigned(t, env, cluster, node, inst, 30*time.Second)
	t.Logf("labelled node got %s, associated and published in %s", alloc, time.Since(start))

	// ListAddresses: a viewer may, a stranger may not.
	ns := env.Namespace(t, nil)
	viewerToken := env.TokenFile(t, ns, "viewer")
	strangerToken := env.TokenFile(t, ns, "stranger")
	_, err := env.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "eipd-viewer-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipledger:viewer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "viewer", Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list := func(tokenFile string) (*eipdv1.ListAddressesResponse, error) {
		opts, err := authz.DialOptions(tokenFile, "", true)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(r.GRPCAddr(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return eipdv1grpc.NewEIPServiceClient(conn).ListAddresses(ctx, &eipdv1.ListAddressesRequest{Node: node})
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		resp, err := list(viewerToken)
		if err != nil {
			return err
		}
		if len(resp.GetAddresses()) != 1 {
			return fmt.Errorf("ListAddresses = %v, want 1 entry", resp)
		}
		a := resp.GetAddresses()[0]
		if a.GetAllocationId() != alloc || a.GetState() != controller.StateAssociated || a.GetInstanceId() != inst.ID || a.GetPrivateIp() != inst.PrivateIP {
			return fmt.Errorf("ListAddresses entry = %v, want %s Associated on %s/%s", a, alloc, inst.ID, inst.PrivateIP)
		}
		return nil
	})
	if _, err := list(strangerToken); status.Code(err) != codes.PermissionDenied {
		t.Errorf("stranger's ListAddresses = %v, want PermissionDenied", err)
	}

	deleteNode(t, env, node)
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := moto.Addresses(t, cluster); len(got) != 0 {
			return fmt.Errorf("moto still has %d addresses after the node was deleted", len(got))
		}
		return nil
	})
}

func TestNoDuplicateThroughStreamLagDroppedAllocateAndBurst(t *testing.T) {
	env := testenv.Get(t)
	cluster, lease, prefix := names(t)
	r := startReplica(t, env, startWatcher(t, env), "solo", replicaOpts{cluster: cluster, lease: lease, minInterval: 0})
	const delay = 4 * time.Second
	r.proxy.SetVisibilityDelay(delay)
	r.proxy.Inject("AllocateAddress", faultproxy.DropResponse, 1)
	inst := ec2test.Get(t).RunInstance(t)
	node := prefix + "-burst"
	start := time.Now()
	createNode(t, env, cluster, node, inst)
	for i := range 50 {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"ipledger.io/test-burst":"%d"}}}`, i)
		if _, err := env.Client.CoreV1().Nodes().Patch(context.Background(), node, k8stypes.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitAssigned(t, env, cluster, node, inst, 40*time.Second)
	t.Logf("converged in %s with a dropped AllocateAddress, %s visibility delay and 50 updates", time.Since(start), delay)
	for time.Since(start) < delay+2*time.Second {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"ipledger.io/test-burst":"after-%d"}}}`, time.Now().UnixNano())
		if _, err := env.Client.CoreV1().Nodes().Patch(context.Background(), node, k8stypes.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // pacing the burst, not synchronisation
	}
	if got := addressesFor(t, cluster, node); len(got) != 1 {
		t.Fatalf("%d addresses tagged for %s, want exactly 1: %v", len(got), node, got)
	}
	if n := r.proxy.Count("AllocateAddress"); n != 1 {
		t.Errorf("AllocateAddress sent %d times, want 1", n)
	}
}

func TestOnlyTheLeaseHolderMutatesEC2(t *testing.T) {
	env := testenv.Get(t)
	cluster, lease, prefix := names(t)
	moto := ec2test.Get(t)
	w := startWatcher(t, env)
	a := startReplica(t, env, w, "a", replicaOpts{cluster: cluster, lease: lease, minInterval: time.Second})
	b := startReplica(t, env, w, "b", replicaOpts{cluster: cluster, lease: lease, minInterval: time.Second})
	var insts []ec2test.Instance
	for i := range 3 {
		inst := moto.RunInstance(t)
		insts = append(insts, inst)
		createNode(t, env, cluster, fmt.Sprintf("%s-n%d", prefix, i), inst)
	}
	for i, inst := range insts {
		waitAssigned(t, env, cluster, fmt.Sprintf("%s-n%d", prefix, i), inst, 30*time.Second)
	}
	holder := func() string {
		l, err := env.Client.CoordinationV1().Leases(system).Get(context.Background(), lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	leaderR, standby := a, b
	if holder() == "b" {
		leaderR, standby = b, a
	}
	t.Logf("leader %s: %v; standby %s: %v", leaderR.name, leaderR.proxy.Counts(), standby.name, standby.proxy.Counts())
	if leaderR.proxy.Mutations() == 0 {
		t.Errorf("leader %s made no EC2 mutation", leaderR.name)
	}
	if n := standby.proxy.Mutations(); n != 0 {
		t.Fatalf("standby %s made %d EC2 mutations: %v", standby.name, n, standby.proxy.Counts())
	}

	// Hand over: the standby takes the lease and carries on alone.
	before := leaderR.proxy.Mutations()
	leaderR.stop()
	inst := moto.RunInstance(t)
	node := prefix + "-after"
	createNode(t, env, cluster, node, inst)
	waitAssigned(t, env, cluster, node, inst, 30*time.Second)
	if holder() != standby.name {
		t.Errorf("lease held by %q, want %s", holder(), standby.name)
	}
	if leaderR.proxy.Mutations() != before {
		t.Errorf("stopped leader kept mutating EC2")
	}
	// The new leader re-read the world and made no duplicate for the old nodes.
	for i := range insts {
		if got := addressesFor(t, cluster, fmt.Sprintf("%s-n%d", prefix, i)); len(got) != 1 {
			t.Errorf("node n%d has %d addresses after the handover, want 1", i, len(got))
		}
	}
}

func TestOrphansPodsAndPreventDeallocationThroughTheStream(t *testing.T) {
	env := testenv.Get(t)
	cluster, lease, prefix := names(t)
	moto := ec2test.Get(t)
	var orphans []string
	for range 3 {
		orphans = append(orphans, aws.ToString(moto.AllocateOrphan(t, cluster).PublicIp))
	}
	ns := env.Namespace(t, nil)
	for i, ip := range []string{orphans[2], orphans[0], orphans[2]} {
		_, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Labels: map[string]string{controller.LabelExternalIP: ip}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The pods exist before eipd starts: its first snapshot holds them.
	r := startReplica(t, env, startWatcher(t, env), "solo", replicaOpts{cluster: cluster, lease: lease, prevent: true, minInterval: time.Second})
	inst := moto.RunInstance(t)
	node := prefix + "-n1"
	createNode(t, env, cluster, node, inst)
	alloc := waitAssigned(t, env, cluster, node, inst, 30*time.Second)
	n, err := env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Labels[controller.LabelExternalIP]; got != orphans[2] {
		t.Fatalf("node got %s, want %s (referenced by two pods)", got, orphans[2])
	}
	deleteNode(t, env, node)
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, a := range moto.Addresses(t, cluster) {
			if aws.ToString(a.AllocationId) != alloc {
				continue
			}
			if aws.ToString(a.AssociationId) != "" || ec2test.Tag(a.Tags, decide.TagNode) != "" {
				return fmt.Errorf("kept address still associated or tagged")
			}
			return nil
		}
		return fmt.Errorf("address %s was released despite --prevent-eip-deallocation", alloc)
	})
	inst2 := moto.RunInstance(t)
	node2 := prefix + "-n2"
	createNode(t, env, cluster, node2, inst2)
	if got := waitAssigned(t, env, cluster, node2, inst2, 30*time.Second); got != alloc {
		t.Errorf("next node got %s, want the kept %s (still the most referenced)", got, alloc)
	}
	if n := r.proxy.Count("ReleaseAddress") + r.proxy.Count("AllocateAddress"); n != 0 {
		t.Errorf("%d Allocate/Release calls with orphans available and --prevent-eip-deallocation", n)
	}
}

func TestTermStartSweepsAddressesOfVanishedNodes(t *testing.T) {
	env := testenv.Get(t)
	cluster, lease, prefix := names(t)
	moto := ec2test.Get(t)
	// A Node deleted while no eipd was running left its address behind.
	ghost := moto.AllocateOrphan(t, cluster, types.Tag{Key: aws.String(decide.TagNode), Value: aws.String(prefix + "-ghost")})
	kept := moto.AllocateOrphan(t, cluster) // an orphan is not stale: it stays
	r := startReplica(t, env, startWatcher(t, env), "solo", replicaOpts{cluster: cluster, lease: lease, minInterval: time.Second})
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, a := range moto.Addresses(t, cluster) {
			if aws.ToString(a.AllocationId) == aws.ToString(ghost.AllocationId) {
				return fmt.Errorf("address of the vanished node still allocated")
			}
		}
		return nil
	})
	if got := moto.Addresses(t, cluster); len(got) != 1 || aws.ToString(got[0].AllocationId) != aws.ToString(kept.AllocationId) {
		t.Errorf("moto has %d addresses, want only the orphan %s", len(got), aws.ToString(kept.AllocationId))
	}
	if n := r.proxy.Count("ReleaseAddress"); n != 1 {
		t.Errorf("ReleaseAddress sent %d times, want 1", n)
	}
}

// TestStartupTaintComesOffThroughTheInstallsPolicy: as its own
// ServiceAccount, under the install's RBAC and admission policies, eipd
// removes the startup taint of a Node once its address is on, and leaves
// the Node's other taints.
func TestStartupTaintComesOffThroughTheInstallsPolicy(t *testing.T) {
	env := testenv.Get(t)
	moto := ec2test.Get(t)
	cluster, lease, prefix := names(t)
	inst := moto.RunClusterInstance(t, cluster)
	watcher := startWatcher(t, env)
	startReplica(t, env, watcher, "a", replicaOpts{cluster: cluster, lease: lease})
	node := prefix + "-tainted"
	createTaintedNode(t, env, node, inst, true)
	alloc := waitAssigned(t, env, cluster, node, inst, time.Minute)
	waitUntainted(t, env, []string{node})
	n, err := env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations[controller.AnnotationAllocationID] != alloc || !slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == "example.com/other" }) {
		t.Fatalf("node %s: allocation %q (want %s), taints %v (example.com/other must stay)", node, n.Annotations[controller.AnnotationAllocationID], alloc, n.Spec.Taints)
	}
}
