package cluster_test

// Upgrade N-1 → N, as pods (docs/upgrading.md): TestMain installs the
// previous release (hack/previous-release) from its own source and images,
// gives it work, rolls today's overlays/e2e over it, downgrades to the
// previous release as docs/upgrading.md describes, and upgrades again, so
// that every other test runs on today's install. Each roll is sampled every
// 200ms; TestUpgradeFromPreviousRelease reports what the samples found.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// upgraded is what TestMain's way through the previous release found;
// TestUpgradeFromPreviousRelease reports it.
var upgraded phaseReport

// TestUpgradeFromPreviousRelease reports the upgrade, downgrade and upgrade
// again that TestMain's install went through (throughPreviousRelease): no
// address moved or vanished at any sample of the three rolls, the ledger
// equalled the statuses after each, new Services were allocated after each,
// old and new replicas ran side by side, and no Lease went back from the
// newer version to the older during an upgrade.
func TestUpgradeFromPreviousRelease(t *testing.T) { upgraded.report(t, "the previous release") }

// phaseReport is what a phase TestMain ran before the tests — on the fresh
// node, where no test can run it — found: its test reports it.
type phaseReport struct {
	ran      bool
	skipped  string // why it did not run
	summary  []string
	findings []string // each fails the test
}

// report logs the summary and fails t with each finding; it skips t when
// the install did not go through what (the phase did not run).
func (r *phaseReport) report(t *testing.T, what string) {
	get(t)
	if !r.ran {
		t.Skipf("the install did not go through %s: %s", what, r.skipped)
	}
	for _, line := range r.summary {
		t.Log(line)
	}
	for _, f := range r.findings {
		t.Error(f)
	}
}

// throughPreviousRelease runs before TestMain applies today's overlay: it
// builds (hack/previous-release.sh, cached by commit) and imports the
// previous release's images, installs its overlays/e2e, allocates under it,
// upgrades to overlay, downgrades and upgrades again. It returns an error
// only when the install cannot go on (a roll that does not finish); what a
// stage finds otherwise goes to TestUpgradeFromPreviousRelease.
// IPLEDGER_CLUSTER_UPGRADE=skip leaves it out.
func (e *env) throughPreviousRelease(ctx context.Context, root, overlay string, logf func(string, ...any)) error {
	if os.Getenv("IPLEDGER_CLUSTER_UPGRADE") == "skip" {
		upgraded.skipped = "IPLEDGER_CLUSTER_UPGRADE=skip"
		return nil
	}
	upgraded.ran = true
	s := &stage{name: "TestUpgradeFromPreviousRelease", logf: logf}
	phase := func(what string, start time.Time) {
		line := fmt.Sprintf("phase %-40s %s", what, time.Since(start).Round(100*time.Millisecond))
		s.Logf("%s", line)
		upgraded.summary = append(upgraded.summary, line)
	}
	note := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		s.Logf("%s", line)
		upgraded.summary = append(upgraded.summary, line)
	}
	defer func() { upgraded.findings = append(upgraded.findings, s.findings...) }()

	start := time.Now()
	cache, warm, err := previousReleaseCache(ctx, root)
	if err != nil {
		return err
	}
	version, err := os.ReadFile(filepath.Join(cache, "version"))
	if err != nil {
		return err
	}
	old := "v" + strings.TrimSpace(string(version))
	if warm {
		phase("previous release images (cached)", start)
	} else {
		phase("previous release images (cold build)", start)
	}
	start = time.Now()
	if err := e.node.ImportImages(ctx, filepath.Join(cache, "images")); err != nil {
		return err
	}
	phase("previous release images imported", start)

	start = time.Now()
	previous := filepath.Join(cache, "overlay")
	if !s.run(func() { e.installPrevious(ctx, s, previous) }) {
		return fmt.Errorf("install of the previous release %s failed: %s", old, strings.Join(s.findings, "; "))
	}
	phase("install of "+old, start)

	start = time.Now()
	var w *workload
	current, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return err
	}
	versions := map[string]string{"dev": strings.TrimSpace(string(current)), old: strings.TrimSpace(string(version))}
	if !s.run(func() { w = e.allocate(ctx, s, versions) }) {
		return fmt.Errorf("allocating under %s failed: %s", old, strings.Join(s.findings, "; "))
	}
	phase("allocations under "+old, start)
	defer func() { s.run(s.cleanup) }()

	rolls := []struct {
		what, overlay, from, to string
	}{
		{"upgrade " + old + " → dev", overlay, old, "dev"},
		{"downgrade dev → " + old, previous, "dev", old},
		{"upgrade again " + old + " → dev", overlay, old, "dev"},
	}
	for i, r := range rolls {
		start = time.Now()
		var rep rollReport
		if !s.run(func() { rep = e.roll(ctx, s, w, fmt.Sprintf("r%d", i), r.overlay, r.from, r.to) }) && rep.samples == 0 {
			note("%s", e.recentLogs(ctx, "ipledger-ipam", "ipledger-watcher"))
			return fmt.Errorf("%s failed: %s", r.what, strings.Join(s.findings, "; "))
		}
		phase(r.what, start)
		for _, line := range rep.lines {
			note("  %s: %s", r.what, line)
		}
		if !s.run(func() { e.keptAcrossReleases(ctx, s, w, i) }) {
			return fmt.Errorf("after %s, the kept address: %s", r.what, strings.Join(s.findings, "; "))
		}
	}
	return nil
}

// keptAcrossReleases proves a kept address's compatibility rule
// (docs/upgrading.md) after roll i: under the new release a deleted Service's
// address is kept for it (i = 0); the previous release, which knows kept
// addresses only as reservations for their Service, reads that ledger,
// allocates beside it (roll checked a new Service gets an address) and
// hands the address to nobody (i = 1); the new release again gives it back
// to the Service created again (i = 2).
func (e *env) keptAcrossReleases(ctx context.Context, s *stage, w *workload, i int) {
	conn := e.ipamConn(ctx, s, w.operatorToken, false)
	ipam := ipamv1grpc.NewIPAMServiceClient(conn)
	switch i {
	case 0:
		w.keptIP = e.ips(s, w.ns, []string{"batch"}, time.Minute)["batch"]
		if err := e.client.CoreV1().Services(w.ns).Delete(ctx, "batch", metav1.DeleteOptions{}); err != nil {
			s.Fatal(err)
		}
		w.services = slices.DeleteFunc(w.services, func(n string) bool { return n == "batch" })
		testenv.Eventually(s, time.Minute, func() error {
			resp, err := ipam.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Ip{Ip: w.keptIP}})
			if err != nil {
				return err
			}
			if a := resp.GetAllocations(); len(a) != 1 || a[0].GetKeptUntil() == "" || a[0].GetService().GetName() != "batch" {
				return fmt.Errorf("%s, batch's, is not kept for it: %v", w.keptIP, a)
			}
			return nil
		})
	case 1:
		resp, err := ipam.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Ip{Ip: w.keptIP}})
		if err != nil {
			s.Fatalf("the previous release's GetAllocation %s: %v", w.keptIP, err)
		}
		if r := resp.GetReservation(); r.GetForService().GetName() != "batch" || len(resp.GetAllocations()) != 0 {
			s.Errorf("the previous release shows %s as %v, want a reservation for batch, held by nobody", w.keptIP, resp)
		}
	case 2:
		journey.CreateLoadBalancer(s, e.client, w.ns, "batch", nil, corev1.ProtocolTCP, 80)
		w.services = append(w.services, "batch")
		if got := e.ips(s, w.ns, []string{"batch"}, 2*time.Minute)["batch"]; got != w.keptIP {
			s.Errorf("batch, created again, got %s, want %s, kept for it across the downgrade and the upgrade", got, w.keptIP)
		}
	}
}

// previousReleaseCache runs hack/previous-release.sh and says whether the
// cache of the commit hack/previous-release names was already complete.
func previousReleaseCache(ctx context.Context, root string) (dir string, warm bool, err error) {
	raw, err := os.ReadFile(filepath.Join(root, "hack", "previous-release"))
	if err != nil {
		return "", false, err
	}
	var commit string
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "commit" {
			commit = f[1]
		}
	}
	cacheRoot := os.Getenv("IPLEDGER_RELEASES_CACHE")
	if cacheRoot == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", false, err
		}
		cacheRoot = filepath.Join(home, ".cache", "ipledger-releases")
	}
	if commit != "" {
		_, err := os.Stat(filepath.Join(cacheRoot, commit, ".complete"))
		warm = err == nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "previous-release.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", false, fmt.Errorf("hack/previous-release.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), warm, nil
}

// installPrevious applies the previous release's overlays/e2e, points eipd
// at this run's moto and waits for every Deployment.
func (e *env) installPrevious(ctx context.Context, s *stage, overlay string) {
	e.kubectl(s, "apply", "--server-side", "-k", overlay)
	restart, err := e.applyEC2Secret(ctx)
	if err != nil {
		s.Fatal(err)
	}
	if restart {
		e.kubectl(s, "-n", systemNS, "rollout", "restart", "deploy/ipledger-eipd")
	}
	for _, d := range deployments {
		e.rolledOut(s, d)
	}
}

// workload is what the previous release is given to hold through the
// rolls: Services in a namespace of their own with a pool of its own (plain
// ones, two sharing an address, one requesting an address, one requesting
// the address reserved for it), a reservation for no Service, VMs behind a
// Service (ExternalWorkloads) and a Node with an Elastic IP.
type workload struct {
	ns, pool      string
	prefix        string // the pool's first three octets, "10.x.0."
	reserved      []string
	node, eip     string
	slice         []string
	operatorToken string
	services      []string
	// keptIP is what "batch" held when it was deleted under the new
	// release (keptAcrossReleases).
	keptIP string
	// versions are the releases by image tag: VERSION for dev, the
	// previous release's for its tag.
	versions map[string]string
}

func (e *env) allocate(ctx context.Context, s *stage, versions map[string]string) *workload {
	w := &workload{versions: versions}
	ns, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "upgrade-"}}, metav1.CreateOptions{})
	if err != nil {
		s.Fatal(err)
	}
	w.ns = ns.Name
	s.Cleanup(func() { e.cleanupWorkload(ctx, s, w) })
	w.pool = journey.CreatePool(s, e.dynamic, "upgrade", 24, w.ns)
	pool, err := e.dynamic.Resource(poolsGVR).Get(ctx, w.pool, metav1.GetOptions{})
	if err != nil {
		s.Fatal(err)
	}
	cidr := pool.Object["spec"].(map[string]any)["addresses"].([]any)[0].(string)
	w.prefix = cidr[:strings.LastIndex(cidr, ".")+1]
	w.operatorToken = e.operatorToken(s)

	// Reservations go to the leader (the holder of the Lease ipledger-ipam).
	leader := e.ipamConn(ctx, s, w.operatorToken, true)
	for _, r := range []*ipamv1.ReserveAddressRequest{
		{Ip: w.prefix + "250", OwnerNote: "upgrade: held for no Service"},
		{Ip: w.prefix + "240", OwnerNote: "upgrade: held for reserved", ForService: &ipamv1.ServiceRef{Namespace: w.ns, Name: "reserved"}},
	} {
		if _, err := ipamv1grpc.NewIPAMServiceClient(leader).ReserveAddress(ctx, r); err != nil {
			s.Fatalf("ReserveAddress %s: %v", r.Ip, err)
		}
		w.reserved = append(w.reserved, r.Ip)
	}

	for _, name := range []string{"web", "api", "batch"} {
		journey.CreateLoadBalancer(s, e.client, w.ns, name, nil, corev1.ProtocolTCP, 80)
	}
	journey.CreateLoadBalancer(s, e.client, w.ns, "dns-tcp", map[string]string{journey.SharedIPAnnotation: "dns"}, corev1.ProtocolTCP, 53)
	journey.CreateLoadBalancer(s, e.client, w.ns, "dns-udp", map[string]string{journey.SharedIPAnnotation: "dns"}, corev1.ProtocolUDP, 53)
	journey.CreateLoadBalancer(s, e.client, w.ns, "requested", map[string]string{"ipledger.io/loadBalancerIPs": w.prefix + "230"}, corev1.ProtocolTCP, 80)
	journey.CreateLoadBalancer(s, e.client, w.ns, "reserved", map[string]string{"ipledger.io/loadBalancerIPs": w.prefix + "240"}, corev1.ProtocolTCP, 80)
	w.services = []string{"web", "api", "batch", "dns-tcp", "dns-udp", "requested", "reserved"}
	for i := range 2 {
		journey.CreateWorkload(s, e.dynamic, w.ns, fmt.Sprintf("vm-%d", i), fmt.Sprintf("10.21.0.%d", i+1), map[string]string{"app": "web"}, true)
	}

	inst := e.moto.RunClusterInstance(s, clusterID)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "upgrade-" + strings.ToLower(inst.ID), Labels: map[string]string{"node-restriction.kubernetes.io/ipledger-externalip-auto-assign": "true"}},
		Spec:       corev1.NodeSpec{ProviderID: inst.ProviderID()},
		Status:     corev1.NodeStatus{Addresses: inst.NodeAddresses()},
	}
	journey.CreateNode(s, e.client, node)
	w.node = node.Name

	ips := e.ips(s, w.ns, w.services, 2*time.Minute)
	if ips["dns-tcp"] != ips["dns-udp"] {
		s.Errorf("dns-tcp (%s) and dns-udp (%s) share a key and should share the IP", ips["dns-tcp"], ips["dns-udp"])
	}
	for name, want := range map[string]string{"requested": w.prefix + "230", "reserved": w.prefix + "240"} {
		if ips[name] != want {
			s.Errorf("Service %s requested %s and got %q", name, want, ips[name])
		}
	}
	testenv.Eventually(s, 2*time.Minute, func() error {
		n, err := e.client.CoreV1().Nodes().Get(ctx, w.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if w.eip = n.Labels["ipledger.io/externalip"]; w.eip == "" {
			return fmt.Errorf("node %s has no Elastic IP yet", w.node)
		}
		return nil
	})
	testenv.Eventually(s, 2*time.Minute, func() error {
		addrs, err := journey.SliceAddresses(ctx, e.client, w.ns, "web")
		if err != nil {
			return err
		}
		if strings.Join(addrs, ",") != "10.21.0.1,10.21.0.2" {
			return fmt.Errorf("web's slices hold %v", addrs)
		}
		w.slice = addrs
		return nil
	})
	e.consistent(s, "")
	e.stillReserved(ctx, s, w)
	return w
}

// cleanupWorkload takes the workload away before the other tests run: the
// reservations (through the leader), the Services, the pool (ipam's
// finalizer holds it until its addresses are released), the namespace.
func (e *env) cleanupWorkload(ctx context.Context, s *stage, w *workload) {
	if len(w.reserved) > 0 {
		leader := e.ipamConn(ctx, s, w.operatorToken, true)
		for _, ip := range w.reserved {
			if _, err := ipamv1grpc.NewIPAMServiceClient(leader).ReleaseReservation(ctx, &ipamv1.ReleaseReservationRequest{Ip: ip}); err != nil {
				s.Errorf("ReleaseReservation %s: %v", ip, err)
			}
		}
	}
	if err := e.client.CoreV1().Namespaces().Delete(ctx, w.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		s.Error(err)
	}
	if w.pool == "" {
		return
	}
	pools := e.dynamic.Resource(poolsGVR)
	if err := pools.Delete(ctx, w.pool, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		s.Error(err)
	}
	testenv.Eventually(s, 2*time.Minute, func() error {
		if _, err := pools.Get(ctx, w.pool, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("IPPool %s is still there (%v)", w.pool, err)
		}
		return nil
	})
}

// operatorToken is a token of ServiceAccount upgrade-operator, bound to
// ipledger:operator, for ipam (reservations).
func (e *env) operatorToken(s *stage) string {
	return journey.RoleToken(s, e.client, "upgrade-operator", "ipledger:operator", authz.IPAMAudience)
}

// ipamConn connects with token to the ipam leader's pod (leader) or to the
// ipam Service; this machine is the node, so pod IPs are reachable.
func (e *env) ipamConn(ctx context.Context, s *stage, token string, leader bool) *grpc.ClientConn {
	addr := ""
	if leader {
		testenv.Eventually(s, time.Minute, func() error {
			holder := e.leader(s, "ipledger-ipam")
			p, err := e.client.CoreV1().Pods(systemNS).Get(ctx, holder, metav1.GetOptions{})
			if err != nil || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
				return fmt.Errorf("the ipam leader %q has no live pod yet (%v)", holder, err)
			}
			addr = p.Status.PodIP + ":9443"
			return nil
		})
	} else {
		svc, err := e.client.CoreV1().Services(systemNS).Get(ctx, "ipledger-ipam", metav1.GetOptions{})
		if err != nil {
			s.Fatal(err)
		}
		addr = svc.Spec.ClusterIP + ":9443"
	}
	return journey.Dial(s, addr, token)
}

// stillReserved checks through ipam that the reservations are in the ledger.
func (e *env) stillReserved(ctx context.Context, s *stage, w *workload) {
	conn := e.ipamConn(ctx, s, w.operatorToken, false)
	for _, ip := range w.reserved {
		testenv.Eventually(s, 30*time.Second, func() error {
			resp, err := ipamv1grpc.NewIPAMServiceClient(conn).GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Ip{Ip: ip}})
			if err != nil {
				return err
			}
			if resp.GetReservation() == nil {
				return fmt.Errorf("%s is not reserved in the ledger", ip)
			}
			return nil
		})
	}
}

// rollReport is what one roll's samples saw.
type rollReport struct {
	samples int
	lines   []string
}

// podSeen is a pod of ipledger-system as the samples saw it.
type podSeen struct {
	deploy, version string
	readyAt         time.Time // its Ready condition's transition, when Ready
	deletedAt       time.Time // its deletionTimestamp, once set
}

// roll applies overlay over the install running version from and waits
// for every Deployment, sampling every 200ms while Services keep coming:
// every address held at any sample is held by the same Service at every
// later sample (none moves, none vanishes), the EIP and the VMs' slice stay,
// no address is on two Services. Then every Service of the load gets an
// address, a new one does too, the ledger equals the statuses, the
// reservations are still there. The samples also record which versions
// were Ready side by side and every Lease holder; an upgrade (to "dev")
// fails if a Lease goes back to a pod of the older version.
func (e *env) roll(ctx context.Context, s *stage, w *workload, name, overlay, from, to string) (rep rollReport) {
	held := map[string]string{} // ns/name -> IP, from its first sample with one
	list, err := journey.LoadBalancers(ctx, e.client)
	if err != nil {
		s.Fatal(err)
	}
	for _, svc := range list {
		if in := svc.Status.LoadBalancer.Ingress; len(in) == 1 {
			held[svc.Namespace+"/"+svc.Name] = in[0].IP
		}
	}
	pods := map[string]*podSeen{}
	holders := map[string][]string{} // Lease -> its holders in turn, "pod (version)"
	holderVersions := map[string][]string{}
	var overlapSampled []string
	samples := sample(func(ctx context.Context) []string {
		var found []string
		svcs, err := journey.LoadBalancers(ctx, e.client)
		if err != nil {
			return nil // the API server is not what is tested here
		}
		now := map[string]string{}
		for _, svc := range svcs {
			if in := svc.Status.LoadBalancer.Ingress; len(in) == 1 {
				now[svc.Namespace+"/"+svc.Name] = in[0].IP
			}
		}
		for key, ip := range held {
			if now[key] != ip {
				found = append(found, fmt.Sprintf("Service %s held %s, now %q", key, ip, now[key]))
			}
		}
		for key, ip := range now {
			if _, ok := held[key]; !ok {
				held[key] = ip
			}
		}
		if err := journey.NoIPOnTwoServices(svcs); err != nil {
			found = append(found, err.Error())
		}
		if n, err := e.client.CoreV1().Nodes().Get(ctx, w.node, metav1.GetOptions{}); err == nil && n.Labels["ipledger.io/externalip"] != w.eip {
			found = append(found, fmt.Sprintf("node %s had the Elastic IP %s, now %q", w.node, w.eip, n.Labels["ipledger.io/externalip"]))
		}
		if addrs, err := journey.SliceAddresses(ctx, e.client, w.ns, "web"); err == nil && !slices.Equal(addrs, w.slice) {
			found = append(found, fmt.Sprintf("web's EndpointSlices held %v, now %v", w.slice, addrs))
		}
		list, err := e.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return found
		}
		ready := map[string]map[string]bool{} // deploy -> versions with a Ready pod not terminating
		version := map[string]string{}
		for _, p := range list.Items {
			d := p.Labels["app.kubernetes.io/name"]
			if !slices.Contains(deployments, d) || len(p.Spec.Containers) == 0 {
				continue
			}
			img := p.Spec.Containers[0].Image
			v := img[strings.LastIndex(img, ":")+1:]
			version[p.Name] = v
			seen := pods[p.Name]
			if seen == nil {
				seen = &podSeen{deploy: d, version: v}
				pods[p.Name] = seen
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && seen.readyAt.IsZero() {
					seen.readyAt = c.LastTransitionTime.Time
				}
			}
			if p.DeletionTimestamp != nil {
				if seen.deletedAt.IsZero() {
					seen.deletedAt = p.DeletionTimestamp.Time
				}
			} else if podReady(p) {
				if ready[d] == nil {
					ready[d] = map[string]bool{}
				}
				ready[d][v] = true
			}
		}
		for d, vs := range ready {
			if vs[from] && vs[to] && !slices.Contains(overlapSampled, d) {
				overlapSampled = append(overlapSampled, d)
			}
		}
		for _, lease := range consumers {
			l, err := e.client.CoordinationV1().Leases(systemNS).Get(ctx, lease, metav1.GetOptions{})
			if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				continue
			}
			h := *l.Spec.HolderIdentity
			v := version[h]
			if v == "" {
				v = "gone"
			}
			entry := h + " (" + v + ")"
			if hs := holders[lease]; len(hs) == 0 || hs[len(hs)-1] != entry {
				holders[lease] = append(hs, entry)
				holderVersions[lease] = append(holderVersions[lease], v)
			}
		}
		return found
	})

	// Services keep coming through the roll.
	stop := make(chan struct{})
	done := make(chan error, 1)
	var created []string
	go func() {
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			case <-tick.C:
			}
			svc := fmt.Sprintf("%s-%d", name, i)
			if _, err := e.client.CoreV1().Services(w.ns).Create(context.Background(), loadBalancer(w.ns, svc), metav1.CreateOptions{}); err != nil {
				done <- fmt.Errorf("create Service %s/%s: %w", w.ns, svc, err)
				return
			}
			created = append(created, svc)
		}
	}()
	stopLoad := func() {
		select {
		case <-stop:
			return
		default:
		}
		close(stop)
		if err := <-done; err != nil {
			s.Error(err)
		}
	}
	defer stopLoad()

	e.kubectl(s, "apply", "--server-side", "-k", overlay)
	for _, d := range deployments {
		e.rolledOut(s, d)
	}
	// Every replica of every Deployment runs to, and every Lease is held by
	// one of them, before the sampling stops.
	testenv.Eventually(s, 2*time.Minute, func() error {
		for _, lease := range consumers {
			h := e.leader(s, lease)
			p, err := e.client.CoreV1().Pods(systemNS).Get(ctx, h, metav1.GetOptions{})
			if err != nil || p.DeletionTimestamp != nil || !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+to) {
				return fmt.Errorf("the Lease %s is held by %q, not by a live %s pod (%v)", lease, h, to, err)
			}
		}
		return nil
	})
	stopLoad()
	samples.check(s, name+": addresses, EIP and slices through the roll")
	rep.samples = samples.samples

	// Side by side: a pod of to became Ready before a pod of from of the
	// same Deployment was deleted.
	var overlap []string
	for _, d := range deployments {
		for _, n := range pods {
			if n.deploy != d || n.version != to || n.readyAt.IsZero() {
				continue
			}
			if slices.ContainsFunc(slices.Collect(maps.Values(pods)), func(o *podSeen) bool {
				return o.deploy == d && o.version == from && !o.deletedAt.IsZero() && !n.readyAt.After(o.deletedAt)
			}) {
				overlap = append(overlap, d)
				break
			}
		}
	}
	sort.Strings(overlapSampled)
	rep.lines = append(rep.lines,
		fmt.Sprintf("%d samples; %d Services created during the roll", samples.samples, len(created)),
		fmt.Sprintf("%s and %s Ready side by side (by the pods' Ready and deletion times): %v; in one sample: %v", from, to, overlap, overlapSampled))
	if !slices.Contains(overlap, "ipledger-ipam") {
		s.Errorf("%s: no %s ipam pod was Ready before the last %s one was deleted: the roll did not run the versions side by side", name, to, from)
	}
	for _, lease := range consumers {
		rep.lines = append(rep.lines, fmt.Sprintf("Lease %s: %s", lease, strings.Join(holders[lease], " → ")))
		if to != "dev" {
			continue
		}
		vs := holderVersions[lease]
		if i := slices.Index(vs, to); i >= 0 && slices.Contains(vs[i:], from) {
			s.Errorf("%s: the Lease %s went back from %s to %s: %s", name, lease, to, from, strings.Join(holders[lease], " → "))
		}
	}

	// After the roll: everything created gets an address, so does a new
	// Service, the ledger equals the statuses, the reservations stay.
	e.ips(s, w.ns, append(append([]string(nil), w.services...), created...), 2*time.Minute)
	after := name + "-after"
	journey.CreateLoadBalancer(s, e.client, w.ns, after, nil, corev1.ProtocolTCP, 80)
	w.services = append(w.services, created...)
	w.services = append(w.services, after)
	e.ips(s, w.ns, []string{after}, 2*time.Minute)
	e.consistent(s, "")
	e.stillReserved(ctx, s, w)
	rep.lines = append(rep.lines, e.buildInfo(ctx, s, w.versions[to]))
	return rep
}

// buildInfo checks what docs/upgrading.md says every replica reports of its
// release: ipledger_build_info{version} from 0.3.0 on, nothing before (a
// downgrade to 0.2.0 takes the metric away).
func (e *env) buildInfo(ctx context.Context, s *stage, version string) string {
	since := version != "0.2.0" && !strings.HasPrefix(version, "0.1.")
	var seen []string
	for _, d := range deployments {
		for _, p := range e.pods(s, d) {
			m, err := e.metrics(ctx, p.Name)
			if err != nil {
				s.Error(err)
				continue
			}
			var info []string
			for key := range m {
				if strings.HasPrefix(key, "ipledger_build_info") {
					info = append(info, key)
				}
			}
			switch {
			case since && (len(info) != 1 || !strings.Contains(info[0], "version="+version)):
				s.Errorf("%s runs %s and should export one ipledger_build_info{version=%q}: %v", p.Name, version, version, info)
			case !since && len(info) > 0:
				s.Errorf("%s runs %s, which predates ipledger_build_info, and exports %v", p.Name, version, info)
			}
			seen = append(seen, fmt.Sprintf("%s=%d", d, len(info)))
		}
	}
	return fmt.Sprintf("ipledger_build_info series per pod (release %s): %s", version, strings.Join(seen, " "))
}

// stage is the testing.TB TestMain's install gives the scenario helpers
// (they take a testing.TB): Errorf records a finding, Fatalf records one
// and ends the stage (run recovers it), Cleanup runs at cleanup. Only the
// methods below are called; the embedded TB is nil.
type stage struct {
	testing.TB
	name     string
	label    string // the log lines' prefix; "upgrade" when empty
	logf     func(string, ...any)
	mu       sync.Mutex
	findings []string
	cleanups []func()
}

type stageFatal struct{}

func (s *stage) Helper()      {}
func (s *stage) Name() string { return s.name }
func (s *stage) Logf(format string, args ...any) {
	label := s.label
	if label == "" {
		label = "upgrade"
	}
	s.logf("test-cluster: "+label+": "+format, args...)
}
func (s *stage) Log(args ...any) { s.Logf("%s", fmt.Sprint(args...)) }
func (s *stage) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.findings = append(s.findings, msg)
	s.mu.Unlock()
	s.Logf("FAIL: %s", msg)
}
func (s *stage) Error(args ...any) { s.Errorf("%s", fmt.Sprint(args...)) }
func (s *stage) Fatalf(format string, args ...any) {
	s.Errorf(format, args...)
	panic(stageFatal{})
}
func (s *stage) Fatal(args ...any) { s.Error(args...); panic(stageFatal{}) }
func (s *stage) FailNow()          { panic(stageFatal{}) }
func (s *stage) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.findings) > 0
}
func (s *stage) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }
func (s *stage) TempDir() string {
	dir, err := os.MkdirTemp("", "ipledger-upgrade-")
	if err != nil {
		s.Fatal(err)
	}
	s.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// run runs f, which may end with Fatal, and reports whether it ended
// without a new finding.
func (s *stage) run(f func()) (ok bool) {
	s.mu.Lock()
	before := len(s.findings)
	s.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			if _, fatal := r.(stageFatal); !fatal {
				panic(r)
			}
		}
		s.mu.Lock()
		ok = len(s.findings) == before
		s.mu.Unlock()
	}()
	f()
	return true
}

// cleanup runs the cleanups, the last registered first.
func (s *stage) cleanup() {
	for len(s.cleanups) > 0 {
		f := s.cleanups[len(s.cleanups)-1]
		s.cleanups = s.cleanups[:len(s.cleanups)-1]
		s.run(f)
	}
}

// recentLogs are the last lines of every pod of the deployments, for a
// failed roll's report.
func (e *env) recentLogs(ctx context.Context, deployments ...string) string {
	var b strings.Builder
	for _, d := range deployments {
		out, err := e.node.Kubectl(ctx, nil, "logs", "-n", systemNS, "-l", "app.kubernetes.io/name="+d, "--tail=40", "--prefix", "--max-log-requests=10")
		fmt.Fprintf(&b, "--- the last log lines of %s's pods (%v):\n%s\n", d, err, out)
	}
	return b.String()
}
