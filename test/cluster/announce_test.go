package cluster_test

// The pairing docs/reachability.md promises, proven on the wire: ipam
// allocates, MetalLB's speaker (layer 2, hack/build-speaker.sh) announces,
// and a machine on the LAN — a network namespace of its own on a test bridge
// (cluster.LAN), not the node's own stack, so kube-proxy's OUTPUT rules do
// not count — resolves the address by ARP and gets its answer from the
// Service's pod.

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/lab/cluster"
	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/testenv"
)

const (
	// speakerNS is testdata/metallb-speaker's namespace.
	speakerNS = "ipledger-test-metallb"
	// speakerImage is the name the test imports the speaker's image under.
	speakerImage = "ipledger.test/metallb-speaker:pinned"
	// lanBridge is the name of each node's link to the test LAN
	// (cluster.LAN.Bridge), the only interface the speaker may announce on.
	lanBridge = "ipl-lan0"
)

var (
	// lanSubnet is the test LAN, inside cluster.TestRanges and apart from
	// every other test's pools (10.<100+n>, 10.<200+n>, 10.21).
	lanSubnet = netip.MustParsePrefix("10.190.77.0/24")
	// announcePool is ipledger's IPPool on the LAN, and MetalLB's
	// IPAddressPool covering it.
	announcePool = netip.MustParsePrefix("10.190.77.64/28")
	clientAddr   = netip.MustParseAddr("10.190.77.2")

	servicel2statusesGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}
)

// target is one LoadBalancer Service the LAN client reaches and the pod
// that must answer.
type target struct {
	svc, pod string
	port     int32
}

// TestAnnounce: with ipam allocating and only MetalLB's speaker announcing
// (an IPAddressPool with autoAssign false over ipledger's IPPool, an
// L2Advertisement held to the test LAN's bridge, no MetalLB controller), a
// client on the LAN resolves each LoadBalancer address by ARP — answered
// with the bridge's hardware address, by the speaker: before the speaker
// runs nobody answers — and gets the HTTP answer of the Service's pod: a
// Service of its own (externalTrafficPolicy Local: the pod sees the client's
// own address), two Services sharing one address by ipledger's sharing key on
// two ports, after an ipam leader failover (and a Service allocated by the
// new leader) and after a speaker restart, each Service keeping its address
// throughout; and, with the Gateway API's CRDs installed while it all runs,
// the address a Gateway asks for in spec.addresses, given to its Service;
// `why` (ExplainService) names the node announcing, and follows the
// L2Advertisement's removal and return (announcedBy). The speaker's ARP stays on the LAN: none naming a LAN address
// is seen on the machine's uplink, nor on the pods' bridge (the
// L2Advertisement's interfaces keep the speaker off it).
func TestAnnounce(t *testing.T) {
	e := get(t)
	ctx := context.Background()
	speakerDir, lan := e.speakerLAN(t)
	client, err := lan.AddClient(clientAddr)
	if err != nil {
		t.Fatal(err)
	}
	lanMAC, err := lan.MAC()
	if err != nil {
		t.Fatal(err)
	}
	uplinks, err := cluster.Uplinks()
	if err != nil {
		t.Fatal(err)
	}
	onLAN := capture(t, lan.Bridge)
	var offLAN []*cluster.ARPCapture
	for _, dev := range append([]string{cluster.Bridge}, uplinks...) {
		offLAN = append(offLAN, capture(t, dev))
	}

	ns := e.namespace(t)
	targets := []target{{"solo", "solo", 80}, {"shared-a", "shared-a", 80}, {"shared-b", "shared-b", 81}}
	e.namespacePool(t, ns, "announce-", announcePool.String())
	for _, tg := range targets {
		e.backend(t, ns, tg.pod)
	}
	e.announced(t, ns, "solo", "solo", 80, corev1.ServiceExternalTrafficPolicyLocal, nil)
	shared := map[string]string{"ipledger.io/allow-shared-ip": "announce"}
	e.announced(t, ns, "shared-a", "shared-a", 80, corev1.ServiceExternalTrafficPolicyCluster, shared)
	e.announced(t, ns, "shared-b", "shared-b", 81, corev1.ServiceExternalTrafficPolicyCluster, shared)
	ips := e.ips(t, ns, []string{"solo", "shared-a", "shared-b"}, 2*time.Minute)
	if ips["shared-a"] != ips["shared-b"] || ips["solo"] == ips["shared-a"] {
		t.Fatalf("addresses %v: want shared-a and shared-b on one address (their sharing key), solo on another", ips)
	}
	for name, ip := range ips {
		if !announcePool.Contains(netip.MustParseAddr(ip)) {
			t.Fatalf("%s got %s, outside the announce pool %s", name, ip, announcePool)
		}
	}
	e.waitReady(t, ns, targets)

	// Nobody answers for the address before the speaker runs: the answer
	// below is the speaker's, not the node's kernel's.
	solo := netip.MustParseAddr(ips["solo"])
	if body, mac, err := reach(ctx, client, solo, 80, "hostname"); err == nil {
		t.Fatalf("before the speaker runs, %s:80 answered %q (ARP: %s): something else announces the LAN's addresses", solo, body, mac)
	} else {
		t.Logf("before the speaker: %v", err)
	}
	if mac, state, err := client.Neighbour(solo); err != nil || mac != nil {
		t.Fatalf("before the speaker, the client's ARP found %s for %s (state %s, %v)", mac, solo, state, err)
	}

	started := time.Now()
	e.startSpeaker(t, speakerDir, uplinks)
	checkAll := func(when string, onMiss ...func()) {
		t.Helper()
		for _, tg := range targets {
			e.reachPod(t, client, lanMAC, netip.MustParseAddr(ips[tg.svc]), tg, when, onMiss...)
		}
	}
	checkAll("with the speaker", e.speakerResync(t, ns, started))
	// Local: kube-proxy leaves the source alone, and the pod sees the LAN
	// client itself.
	if body, _, err := reach(ctx, client, solo, 80, "clientip"); err != nil || !strings.HasPrefix(body, clientAddr.String()+":") {
		t.Errorf("solo's pod saw the request from %q (%v), want the LAN client %s", body, err, clientAddr)
	}

	stable := e.watchAddresses(ns, ips)
	e.failIPAMLeader(t)
	late := target{"after-failover", "solo", 82}
	e.announced(t, ns, late.svc, late.pod, late.port, corev1.ServiceExternalTrafficPolicyCluster, nil)
	lateIP := e.ips(t, ns, []string{late.svc}, 2*time.Minute)[late.svc]
	checkAll("after the ipam leader failover")
	e.reachPod(t, client, lanMAC, netip.MustParseAddr(lateIP), late, "allocated by the new ipam leader")

	restarted := time.Now()
	e.restartSpeaker(t)
	resync := e.speakerResync(t, ns, restarted)
	checkAll("after the speaker restart", resync)
	e.reachPod(t, client, lanMAC, netip.MustParseAddr(lateIP), late, "after the speaker restart", resync)
	stable.check(t, "address changes")
	got := e.ips(t, ns, []string{"solo", "shared-a", "shared-b"}, time.Minute)
	delete(got, late.svc)
	if !maps.Equal(got, ips) {
		t.Errorf("addresses at the end %v, at the start %v", got, ips)
	}
	e.l2Statuses(t, ns, append(targets, late))

	all := append([]string{lateIP}, ips["solo"], ips["shared-a"])
	seen, err := onLAN.Packets()
	if err != nil {
		t.Errorf("capture on %s: %v", onLAN.Interface, err)
	}
	for _, ip := range all {
		if !speakerAnswered(seen, netip.MustParseAddr(ip), lanMAC) {
			t.Errorf("no ARP reply for %s from %s (%s) seen on %s among %d ARP packets: %v", ip, lanMAC, lan.Bridge, onLAN.Interface, len(seen), seen)
		}
	}
	for _, c := range offLAN {
		packets, err := c.Packets()
		if err != nil {
			t.Errorf("capture on %s: %v", c.Interface, err)
		}
		for _, p := range packets {
			if lanSubnet.Contains(p.SenderIP) || lanSubnet.Contains(p.TargetIP) {
				t.Errorf("%s off the LAN, on %s: %s", p, c.Interface, "the speaker announced outside the test LAN")
			}
		}
		t.Logf("%s: %d ARP packets, none about the LAN %s", c.Interface, len(packets), lanSubnet)
	}

	t.Run("WhyNamesTheAnnouncer", func(t *testing.T) {
		e.announcedBy(t, ns, "solo")
	})

	t.Run("Gateway", func(t *testing.T) {
		e.gatewayAnnounced(t, ns, client, lanMAC, ips)
	})

	t.Run("IPv6", func(t *testing.T) {
		// NDP needs an IPv6 address that kube-proxy serves: lab/cluster's
		// node is single-stack IPv4 (ServiceCIDR 10.96.0.0/16, PodCIDR
		// 10.244.0.0/24 on the bridge CNI's host-local IPv4 range), so no
		// Service can have an IPv6 ClusterIP or ingress address here.
		t.Skip("the node is single-stack IPv4 (lab/cluster: ServiceCIDR, PodCIDR): no Service can hold an IPv6 LoadBalancer address for the speaker's NDP to announce")
	})
}

// speakerLAN readies what a test of MetalLB's speaker needs before it
// makes anything of its own: the speaker's build imported into the node,
// no speaker namespace left by a run killed midway (nothing of it may
// answer before this run's speaker does), and the test LAN, closed when the
// test ends. It returns the speaker's build folder and the LAN.
func (e *env) speakerLAN(t *testing.T) (string, *cluster.LAN) {
	t.Helper()
	speakerDir := speakerBuild(t)
	e.importSpeaker(t, speakerDir)
	e.kubectl(t, "delete", "namespace", speakerNS, "--ignore-not-found", "--wait", "--timeout=2m")
	lan, err := cluster.NewLAN(lanBridge, lanSubnet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lan.Close(); err != nil {
			t.Error(err)
		}
	})
	return speakerDir, lan
}

// speakerBuild is hack/build-speaker.sh's folder: $IPLEDGER_SPEAKER_DIR,
// else the script's output (a cold build takes about two minutes).
func speakerBuild(t *testing.T) string {
	return hackBuild(t, "IPLEDGER_SPEAKER_DIR", "build-speaker.sh")
}

// importSpeaker builds the speaker's image and imports it into the node.
func (e *env) importSpeaker(t *testing.T, dir string) {
	e.importBinaryImage(t, filepath.Join(dir, "metallb-speaker"), speakerImage)
}

// importBinaryImage builds an image of one binary as lab/cluster builds the
// node's (lab/containerimage), named ref, and imports it into the node.
func (e *env) importBinaryImage(t *testing.T, binary, ref string) {
	t.Helper()
	img, err := containerimage.Build(containerimage.Contents{
		Binary: binary, Architecture: runtime.GOARCH, Title: filepath.Base(binary),
	})
	if err != nil {
		t.Fatal(err)
	}
	images := t.TempDir()
	if err := containerimage.WriteArchive(filepath.Join(images, filepath.Base(binary)+".tar"), ref, img); err != nil {
		t.Fatal(err)
	}
	if err := e.node.ImportImages(context.Background(), images); err != nil {
		t.Fatal(err)
	}
}

// capture records ARP on dev until the test ends.
func capture(t *testing.T, dev string) *cluster.ARPCapture {
	t.Helper()
	c, err := cluster.CaptureARP(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// startSpeaker installs the release's CRDs, testdata/metallb-speaker's
// RBAC and DaemonSet, and the IPAddressPool and L2Advertisement, and waits
// for the speaker to be Ready. metallb-excludel2 names the uplinks: the
// speaker opens no ARP or NDP responder there at all. Everything goes when
// the test ends.
func (e *env) startSpeaker(t *testing.T, dir string, uplinks []string) {
	t.Helper()
	e.speakerConfig(t, dir, uplinks)
	e.applyTemplate(t, filepath.Join("testdata", "metallb-speaker", "speaker.yaml"), "IMAGE", speakerImage)
	e.logSpeakerOnFailure(t, e.speakerReady(t, ""))
}

// speakerConfig installs what the speaker's DaemonSet needs, as
// startSpeaker says, all but the DaemonSet.
func (e *env) speakerConfig(t *testing.T, dir string, uplinks []string) {
	t.Helper()
	ctx := context.Background()
	testdata := filepath.Join("testdata", "metallb-speaker")
	e.metalLBCRDsAndRBAC(t, dir, testdata)
	var exclude []string
	for _, dev := range uplinks {
		exclude = append(exclude, fmt.Sprintf("%q", "^"+regexp.QuoteMeta(dev)+"$"))
	}
	if _, err := e.client.CoreV1().ConfigMaps(speakerNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "metallb-excludel2"},
		Data:       map[string]string{"excludel2.yaml": "announcedInterfacesToExclude: [" + strings.Join(exclude, ", ") + "]\n"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.applyTemplate(t, filepath.Join(testdata, "config.yaml"), "POOL", announcePool.String(), "BRIDGE", lanBridge)
}

// metalLBCRDsAndRBAC installs MetalLB's CRDs (from its build folder dir),
// waits until they are Established, and applies testdata's rbac.yaml (its
// namespace with it); both go when the test ends, the namespace first,
// while the CRDs its objects need are there.
func (e *env) metalLBCRDsAndRBAC(t *testing.T, dir, testdata string) {
	t.Helper()
	e.kubectl(t, "apply", "--server-side", "-f", filepath.Join(dir, "crd"))
	kubectl := func(ctx context.Context, args ...string) ([]byte, error) { return e.node.Kubectl(ctx, nil, args...) }
	if out, err := testenv.WaitEstablished(context.Background(), kubectl, time.Minute, "-f", filepath.Join(dir, "crd")); err != nil {
		t.Fatalf("MetalLB's CRDs not Established: %v\n%s", err, out)
	}
	e.kubectl(t, "apply", "--server-side", "-f", filepath.Join(testdata, "rbac.yaml"))
	t.Cleanup(func() {
		e.kubectl(t, "delete", "--ignore-not-found", "--wait", "--timeout=2m", "-f", filepath.Join(testdata, "rbac.yaml"))
		e.kubectl(t, "delete", "--ignore-not-found", "--wait", "--timeout=2m", "-f", filepath.Join(dir, "crd"))
	})
}

// logSpeakerOnFailure prints speaker's last log lines when the test fails:
// nothing else tells why it did not answer.
func (e *env) logSpeakerOnFailure(t *testing.T, speaker corev1.Pod) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		raw, err := e.client.CoreV1().Pods(speakerNS).GetLogs(speaker.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if apierrors.IsNotFound(err) {
			t.Logf("speaker %s: gone, its log with it (a restart replaced it)", speaker.Name)
			return
		}
		t.Logf("speaker %s, its last log lines but its configuration's reconciles and interface scans (%v):\n%s", speaker.Name, err, speakerLogTail(string(raw), 120))
	})
}

// speakerLogTail is the last n lines of a speaker's log that are not the
// reconciles of its configuration or its periodic interface scans, which
// fill its debug log every few seconds and hide what tells why it did not
// answer (its Service reconciles, its interfaces, its ARP, its elections).
func speakerLogTail(log string, n int) string {
	var keep []string
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if strings.Contains(line, `"controller":"ConfigReconciler"`) || strings.Contains(line, `"controller":"ConfigurationStateReconciler"`) ||
			strings.Contains(line, `"announced interface to exclude"`) || strings.Contains(line, `"epslice"`) {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep[max(0, len(keep)-n):], "\n")
}

// applyTemplate applies a testdata manifest with its placeholders
// replaced (old, new pairs).
func (e *env) applyTemplate(t *testing.T, path string, oldnew ...string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.NewReplacer(oldnew...).Replace(string(raw))
	if out, err := e.node.Kubectl(context.Background(), bytes.NewBufferString(manifest), "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("apply %s: %v\n%s", path, err, out)
	}
}

// speakerReady waits for the DaemonSet's pod, other than the pod named
// not, to be Ready, and returns it.
func (e *env) speakerReady(t *testing.T, not string) corev1.Pod {
	t.Helper()
	var ready corev1.Pod
	testenv.Eventually(t, 3*time.Minute, func() error {
		list, err := e.client.CoreV1().Pods(speakerNS).List(context.Background(), metav1.ListOptions{LabelSelector: "component=speaker"})
		if err != nil {
			return err
		}
		var seen []string
		for _, p := range list.Items {
			if p.Name != not && p.DeletionTimestamp == nil && podReady(p) {
				ready = p
				return nil
			}
			seen = append(seen, fmt.Sprintf("%s (%s)", p.Name, p.Status.Phase))
		}
		return fmt.Errorf("no Ready speaker pod yet (other than %q): %v", not, seen)
	})
	return ready
}

// restartSpeaker deletes the speaker's pod, waits until it is gone and the
// DaemonSet's next one is Ready. It checks the old pod's logs for RBAC
// denials first: they go with it.
func (e *env) restartSpeaker(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	old := e.speakerReady(t, "")
	e.noRBACDenials(t, old)
	pods := e.client.CoreV1().Pods(speakerNS)
	if err := pods.Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.podGone(t, speakerNS, old.Name)
	next := e.speakerReady(t, old.Name)
	t.Logf("speaker %s replaced by %s", old.Name, next.Name)
	e.noRBACDenials(t, next)
	e.logSpeakerOnFailure(t, next)
}

// backend runs agnhost's netexec as pod name (label app=name), answering
// HTTP on 8080: /hostname is the pod's name, /clientip the peer it saw.
func (e *env) backend(t *testing.T, ns, name string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "agnhost", Image: cluster.AgnhostImage, ImagePullPolicy: corev1.PullNever,
				Args:  []string{"netexec", "--http-port=8080"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/hostname", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitReady waits for the targets' pods to be Ready.
func (e *env) waitReady(t *testing.T, ns string, targets []target) {
	t.Helper()
	testenv.Eventually(t, 3*time.Minute, func() error {
		for _, tg := range targets {
			p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), tg.pod, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !podReady(*p) {
				return fmt.Errorf("pod %s is %s, not Ready", p.Name, p.Status.Phase)
			}
		}
		return nil
	})
}

// announced creates a class-less LoadBalancer Service (ipam's default
// mode, and the speaker's without --lb-class) name on port, selecting
// pod's app label, target port 8080.
func (e *env) announced(t *testing.T, ns, name, pod string, port int32, policy corev1.ServiceExternalTrafficPolicy, annotations map[string]string) {
	t.Helper()
	noNodePorts := false
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: &noNodePorts,
			ExternalTrafficPolicy:         policy,
			Selector:                      map[string]string{"app": pod},
			Ports:                         []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := e.client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Service %s/%s: %v", ns, name, err)
	}
}

// reach has the LAN client forget what ARP told it of ip, then GET
// http://ip:port/path from its own network namespace. It returns the body
// and what ARP resolved ip to.
func reach(ctx context.Context, c *cluster.LANClient, ip netip.Addr, port int, path string) (string, net.HardwareAddr, error) {
	if err := c.ForgetNeighbour(ip); err != nil {
		return "", nil, err
	}
	url := fmt.Sprintf("http://%s/%s", netip.AddrPortFrom(ip, uint16(port)), path)
	var stderr bytes.Buffer
	cmd := c.Command(ctx, "curl", "-sS", "--noproxy", "*", "--connect-timeout", "4", "--max-time", "8", url)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	mac, state, nerr := c.Neighbour(ip)
	if err != nil {
		return "", mac, fmt.Errorf("GET %s from %s: %v: %s (ARP: %s %s %v)", url, c.Netns, err, strings.TrimSpace(stderr.String()), mac, state, nerr)
	}
	return strings.TrimSpace(string(out)), mac, nerr
}

// reachPod waits until the LAN client, resolving ip afresh by ARP, gets
// the answer of tg's pod at ip:tg.port, and ARP named the bridge's address
// (the speaker's answer on the node).
func (e *env) reachPod(t *testing.T, c *cluster.LANClient, mac net.HardwareAddr, ip netip.Addr, tg target, when string, onMiss ...func()) {
	t.Helper()
	start := time.Now()
	testenv.Eventually(t, 2*time.Minute, func() error {
		body, got, err := reach(context.Background(), c, ip, int(tg.port), "hostname")
		if err != nil {
			for _, f := range onMiss {
				f()
			}
			return err
		}
		if body != tg.pod {
			return fmt.Errorf("%s:%d answered %q, want pod %s", ip, tg.port, body, tg.pod)
		}
		if got.String() != mac.String() {
			return fmt.Errorf("ARP resolved %s to %s, want the node's %s on the LAN", ip, got, mac)
		}
		return nil
	})
	t.Logf("%s: %s:%d (%s) answered by pod %s, ARP %s, after %s", when, ip, tg.port, tg.svc, tg.pod, mac, time.Since(start).Round(time.Millisecond))
}

// speakerResync returns what to do while a speaker started (or restarted)
// at since does not answer, for two races in MetalLB v0.16.1's speaker, not
// in ipledger, after which it does not look at a Service again until the
// Service changes:
//
//   - its announcer scans the node's interfaces in the background, every
//     10 s, and a scan that meets an interface vanishing under it (a pod's
//     veth) gives up until the next. A Service reconciled before a scan has
//     succeeded finds none of the L2Advertisement's interfaces: the speaker
//     reports announceFailed ("… doesn't exist …") on it;
//   - its Service reconciler drops, without a retry, every reconcile that
//     comes before its first full pass over the Services
//     (initialLoadPerformed in service_controller.go), and that pass may see
//     an EndpointSlice older than the reconcile it dropped. An
//     externalTrafficPolicy Local Service then stays unannounced, with no
//     Event (twice in about twenty runs: CI and a helper's run, both on
//     the Local Service, the ARP never answered for two minutes).
//
// Each Service the speaker reported the first of on is touched once (an
// annotation) at once, so that it reconciles it again; every Service of ns
// is touched once when the speaker has not answered for resyncAfter since
// the first miss. The test says which and why, so that a run shows whether
// it took a touch.
func (e *env) speakerResync(t *testing.T, ns string, since time.Time) func() {
	touched := map[string]bool{}
	touchedAll := false
	var firstMiss time.Time
	touch := func(name, why string) {
		t.Helper()
		t.Logf("%s: touching Service %s so that the speaker reconciles it again", why, name)
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.ipledger.io/speaker-resync":%q}}}`, time.Now().Format(time.RFC3339Nano))
		if _, err := e.client.CoreV1().Services(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Logf("touch Service %s: %v", name, err)
		}
	}
	return func() {
		t.Helper()
		ctx := context.Background()
		if firstMiss.IsZero() {
			firstMiss = time.Now()
		}
		events, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=announceFailed"})
		if err != nil {
			t.Logf("list announceFailed Events: %v", err)
			return
		}
		for _, ev := range events.Items {
			name := ev.InvolvedObject.Name
			if ev.InvolvedObject.Kind != "Service" || touched[name] || !strings.Contains(ev.Message, "doesn't exist") ||
				eventTime(ev).Before(since.Truncate(time.Second)) {
				continue
			}
			touched[name] = true
			touch(name, fmt.Sprintf("the speaker reported %q on Service %s, before its first scan of the node's interfaces (MetalLB's race)", ev.Message, name))
		}
		if touchedAll || time.Since(firstMiss) < resyncAfter {
			return
		}
		touchedAll = true
		svcs, err := e.client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("list Services: %v", err)
			return
		}
		for _, s := range svcs.Items {
			if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
				touch(s.Name, fmt.Sprintf("the speaker has not answered for %s (MetalLB's dropped reconciles)", resyncAfter))
			}
		}
	}
}

// resyncAfter is how long speakerResync lets a speaker go unanswered before
// it touches every Service: a speaker that lost no reconcile answers within
// about 3 s of Ready (TestAnnounce's logs: 20 ms–2.2 s), so this is ten
// times that.
const resyncAfter = 30 * time.Second

// eventTime is when ev was last seen, whichever of its times its reporter set.
func eventTime(ev corev1.Event) time.Time {
	for _, at := range []time.Time{ev.LastTimestamp.Time, ev.EventTime.Time, ev.FirstTimestamp.Time} {
		if !at.IsZero() {
			return at
		}
	}
	return time.Time{}
}

// watchAddresses samples ns's Services until checked: each of want keeps
// its address, none loses it.
func (e *env) watchAddresses(ns string, want map[string]string) *sampler {
	return sample(func(ctx context.Context) []string {
		list, err := e.client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil // the API server is not what is tested here
		}
		var found []string
		for _, s := range list.Items {
			w, ok := want[s.Name]
			if !ok {
				continue
			}
			var got []string
			for _, in := range s.Status.LoadBalancer.Ingress {
				got = append(got, in.IP)
			}
			if len(got) != 1 || got[0] != w {
				found = append(found, fmt.Sprintf("%s shows %v, had %s", s.Name, got, w))
			}
		}
		return found
	})
}

// failIPAMLeader runs ipam with two replicas, waits for a synced standby,
// deletes the leader's pod and waits for another replica to hold the Lease
// and the Deployment to be whole again (failover_test.go does the same
// under load).
func (e *env) failIPAMLeader(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	e.scale(t, "ipledger-ipam", 2)
	ipams := e.pods(t, "ipledger-ipam")
	var leader string
	testenv.Eventually(t, time.Minute, func() error {
		leader = e.leader(t, "ipledger-ipam")
		for _, p := range ipams {
			m, err := e.metrics(ctx, p.Name)
			if err != nil {
				return err
			}
			if p.Name != leader && m["ipledger_stream_synced"] == 1 {
				return nil
			}
		}
		return fmt.Errorf("leader %q, no synced standby among the %d ipam pods yet", leader, len(ipams))
	})
	e.deletePod(t, podNamed(t, ipams, leader))
	testenv.Eventually(t, time.Minute, func() error {
		if s := e.leader(t, "ipledger-ipam"); s == "" || s == leader {
			return fmt.Errorf("the Lease is held by %q; want a replica other than the deleted leader %s", s, leader)
		}
		return nil
	})
	t.Logf("ipam leader %s deleted; the Lease went to %s", leader, e.leader(t, "ipledger-ipam"))
	t.Logf("the deleted leader's pod was gone after %s", e.podGone(t, systemNS, leader).Round(time.Millisecond))
	e.rolledOut(t, "ipledger-ipam")
	e.consistent(t, "")
}

// l2Statuses checks the speaker's ServiceL2Status of each target: announced
// from the node, on the LAN's bridge only.
func (e *env) l2Statuses(t *testing.T, ns string, targets []target) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() error {
		list, err := e.dynamic.Resource(servicel2statusesGVR).Namespace(speakerNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, s := range list.Items {
			svcNS, _, _ := unstructured.NestedString(s.Object, "status", "serviceNamespace")
			svc, _, _ := unstructured.NestedString(s.Object, "status", "serviceName")
			node, _, _ := unstructured.NestedString(s.Object, "status", "node")
			ifaces, _, _ := unstructured.NestedSlice(s.Object, "status", "interfaces")
			var names []string
			for _, i := range ifaces {
				if m, ok := i.(map[string]any); ok {
					names = append(names, fmt.Sprint(m["name"]))
				}
			}
			if svcNS == ns {
				got[svc] = node + " " + strings.Join(names, ",")
			}
		}
		for _, tg := range targets {
			if want := cluster.NodeName + " " + lanBridge; got[tg.svc] != want {
				return fmt.Errorf("ServiceL2Status of %s: %q, want %q (all: %v)", tg.svc, got[tg.svc], want, got)
			}
		}
		return nil
	})
}

// speakerAnswered says whether packets hold an ARP reply this machine sent
// saying ip is at mac.
func speakerAnswered(packets []cluster.ARPPacket, ip netip.Addr, mac net.HardwareAddr) bool {
	for _, p := range packets {
		if p.Reply && p.Outgoing && p.SenderIP == ip && p.SenderMAC.String() == mac.String() {
			return true
		}
	}
	return false
}

var (
	gatewaysGVR       = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	gatewayClassesGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}
)

// gatewayAnnounced: the Gateway API's CRDs installed while ipledger runs as
// pods (the watcher finds them), a Gateway asking for one address of the
// announce pool, and the LoadBalancer Service a Gateway implementation makes
// for it (Istio's and NGINX Gateway Fabric's GEP-1762 label; no Gateway
// controller runs here, the test makes the Service it would) gets that
// address, which carries the LAN client's request to the Service's pod.
// used are the addresses the other Services hold.
func (e *env) gatewayAnnounced(t *testing.T, ns string, client *cluster.LANClient, lanMAC net.HardwareAddr, used map[string]string) {
	ctx := context.Background()
	testenv.InstallGatewayAPIWith(t, func(ctx context.Context, args ...string) ([]byte, error) { return e.node.Kubectl(ctx, nil, args...) })
	// The watchers look for the CRDs every 30 s; the implementation makes
	// its Service once it has seen the Gateway, so the Gateway is streamed
	// first here too.
	testenv.Eventually(t, 2*time.Minute, func() error {
		for _, p := range e.pods(t, "ipledger-watcher") {
			m, err := e.metrics(ctx, p.Name)
			if err != nil {
				return err
			}
			if m[`ipledger_watcher_optional_kind_served{kind=KIND_GATEWAY}`] != 1 {
				return fmt.Errorf("watcher %s does not serve Gateways yet", p.Name)
			}
		}
		return nil
	})

	want := netip.MustParseAddr("10.190.77.78") // the pool's second-highest: no Service took it
	for svc, ip := range used {
		if ip == want.String() {
			t.Fatalf("%s holds %s already", svc, ip)
		}
	}
	class := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"generateName": "announce-"}, "spec": map[string]any{"controllerName": "example.com/no-controller"}}}
	class, err := e.dynamic.Resource(gatewayClassesGVR).Create(ctx, class, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gw := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"name": "edge", "namespace": ns},
		"spec": map[string]any{"gatewayClassName": class.GetName(),
			"listeners": []any{map[string]any{"name": "http", "port": int64(84), "protocol": "HTTP"}},
			"addresses": []any{map[string]any{"type": "IPAddress", "value": want.String()}}}}}
	if _, err := e.dynamic.Resource(gatewaysGVR).Namespace(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tg := target{"edge-istio", "solo", 84}
	noNodePorts := false
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: tg.svc, Labels: map[string]string{"gateway.networking.k8s.io/gateway-name": "edge"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: &noNodePorts,
			Selector: map[string]string{"app": tg.pod},
			Ports:    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: tg.port, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := e.client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		s, err := e.client.CoreV1().Services(ns).Get(ctx, tg.svc, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := s.Status.LoadBalancer.Ingress; len(got) != 1 || got[0].IP != want.String() {
			return fmt.Errorf("Service %s of Gateway edge shows %v, want the Gateway's %s", tg.svc, got, want)
		}
		return nil
	})
	e.reachPod(t, client, lanMAC, want, tg, "the address a Gateway asked for")
}
