package cluster_test

// An address that keeps carrying traffic when the node announcing it dies:
// MetalLB's speaker on two nodes of one LAN (cluster.LAN's switch, each
// node linked to it), the second node announcing, then failing.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/ipledger/ipledger/lab/cluster"
	"github.com/ipledger/ipledger/lab/testenv"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
)

const (
	// failoverTrials is how many times the second node fails.
	failoverTrials = 3
	// failoverBound is the longest the LAN client may go unanswered after
	// the announcing node fails. It follows from the defaults of the
	// speaker's memberlist (hashicorp/memberlist DefaultLANConfig, which
	// MetalLB v0.16.1 uses unless a memberlist ConfigMap overrides it): a
	// probe every ProbeInterval (1 s), failed at the end of that interval
	// (ProbeTimeout 0.5 s, then its TCP fallback runs to the interval's
	// end); the node is then suspect for SuspicionMult × ProbeInterval ×
	// max(1, log10 n) = 4 s (with two members no other can confirm, so the
	// suspicion runs to its minimum), and declared dead: 5–6 s. The
	// surviving speaker's NodeLeave forces a sync: it wins the election,
	// announces and sends gratuitous ARP, which the client's neighbour table
	// takes; the client's next connect follows within its 1 s timeout: ≈ 7.5
	// s in all. Measured: 6.2–10.2 s over nine trials (BENCHMARKS.md). The
	// bound leaves twice as much for a loaded 2-core machine.
	failoverBound = 20 * time.Second
)

// node2LANAddr is the second node's address on the test LAN (the first's
// is the LAN's first, the client's clientAddr).
var node2LANAddr = netip.MustParseAddr("10.190.77.12")

// TestTrafficAcrossNodeFailure (IPLEDGER_NODES=2: make test-cluster-full):
// MetalLB's speaker on both nodes (memberlist on, as MetalLB's release runs
// it), both nodes on the test LAN, a Service (externalTrafficPolicy
// Cluster, its pod on the first node) whose address — asked for by
// ipledger.io/loadBalancerIPs, one MetalLB's election gives the second
// node — the second node announces, and a client on the LAN sending
// requests without pause; ipledger's pods on the first node. Then, three times, the second node fails
// (cluster.FailNode: its host link down, its kubelet and kube-proxy
// killed), its speaker's container killed, its link to the LAN down. The
// client is answered again, through the first node (ARP: the first node's
// hardware address), within failoverBound; the gap and the requests lost
// are logged. The Service keeps its address throughout, ipam changes
// nothing (its ledger's and history's ConfigMaps keep their
// resourceVersions, it puts no Event on the Service) but the Event
// AnnouncerChanged saying the address moved from the second node to the
// first (issue 49's failover Event across two nodes). After each trial the
// second node comes back (LAN link up, cluster.RestoreNode: host link up,
// kubelet and kube-proxy started, the kubelet restarts the speaker) and the
// address returns to it.
func TestTrafficAcrossNodeFailure(t *testing.T) {
	e := get(t)
	if len(e.node.Nodes) < 2 {
		t.Skip("one node: run with IPLEDGER_NODES=2 (make test-cluster-full) for a node to fail over from")
	}
	ctx := context.Background()
	n1, n2 := e.node.Nodes[0], e.node.Nodes[1]
	speakerDir, lan := e.speakerLAN(t)
	if err := lan.AddNode(n2, node2LANAddr); err != nil {
		t.Fatal(err)
	}
	client, err := lan.AddClient(clientAddr)
	if err != nil {
		t.Fatal(err)
	}
	mac1, err := lan.MAC()
	if err != nil {
		t.Fatal(err)
	}
	mac2, err := lan.NodeMAC(n2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("LAN %s: %s at %s (%s), %s at %s (%s), client %s", lanSubnet, n1.Name, lan.HostAddr, mac1, n2.Name, node2LANAddr, mac2, clientAddr)
	uplinks, err := cluster.Uplinks()
	if err != nil {
		t.Fatal(err)
	}

	// ipledger on the first node: FailNode cuts the second node's pods off
	// with it, and ipam must see the failover to tell it.
	for _, d := range []string{"ipledger-ipam", "ipledger-endpoints", "ipledger-watcher", "ipledger-eipd"} {
		e.placeOn(t, d, n1.Name, n2.Name)
	}
	ns := e.namespace(t)
	e.namespacePool(t, ns, "announce-", announcePool.String())
	e.pinnedPod(t, ns, "web", n1.Name, []string{"netexec", "--http-port=8080"})
	e.runningOn(t, ns, "web", n1)
	ip := addressElecting(n2.Name, []string{n1.Name, n2.Name}, announcePool)
	e.announced(t, ns, "web", "web", 80, corev1.ServiceExternalTrafficPolicyCluster, map[string]string{"ipledger.io/loadBalancerIPs": ip.String()})
	if got := e.ips(t, ns, []string{"web"}, 2*time.Minute)["web"]; got != ip.String() {
		t.Fatalf("Service web got %s, asked for %s", got, ip)
	}
	web := target{"web", "web", 80}

	started := time.Now()
	e.startSpeakers(t, speakerDir, uplinks, []cluster.Node{n1, n2})
	resync := e.speakerResync(t, ns, started)
	e.speakersJoined(t, n1, n2, time.Time{})
	e.announcedFrom(t, ns, "web", n2.Name, resync)
	e.reachPod(t, client, mac2, ip, web, "announced by "+n2.Name, resync)

	stable := e.watchAddresses(ns, map[string]string{"web": ip.String()})
	e.ipamSees(t, ns, "web", n2.Name)
	ledger := e.ledgerVersions(t)
	quiet := time.Now()
	var results []string
	for trial := 1; trial <= failoverTrials; trial++ {
		gap, out, lost, killed := e.failNode(t, trial, ns, lan, client, ip, n1, n2, mac1, mac2)
		results = append(results, fmt.Sprintf("gap %s, outage %s, %d lost", gap.Round(time.Millisecond), out.Round(time.Millisecond), lost))
		restored := time.Now()
		e.restoreNode(t, lan, n2, killed)
		e.speakersJoined(t, n1, n2, restored)
		resync := e.speakerResync(t, ns, restored)
		e.announcedFrom(t, ns, "web", n2.Name, resync)
		e.reachPod(t, client, mac2, ip, web, fmt.Sprintf("trial %d: %s back", trial, n2.Name), resync)
		e.ipamSees(t, ns, "web", n2.Name)
	}
	t.Logf("%s failing, %d trials (bound %s): %s", n2.Name, failoverTrials, failoverBound, strings.Join(results, "; "))

	stable.check(t, "address changes")
	if after := e.ledgerVersions(t); !maps.Equal(after, ledger) {
		t.Errorf("ipam wrote its ledger or history while the node failed: ConfigMaps' resourceVersions %v before, %v after", ledger, after)
	}
	events, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events.Items {
		if eventTime(ev).Before(quiet.Truncate(time.Second)) || ev.Source.Component == "metallb-speaker" || ev.Reason == "AnnouncerChanged" {
			continue
		}
		t.Errorf("Event %s %q on Service web from %s while the node failed: ipam must do nothing but tell the announcer changed", ev.Reason, ev.Message, ev.Source.Component)
	}
}

// addressElecting is the first address of pool (its network address left
// out) for which MetalLB v0.16.1's layer-2 election among nodes
// (speaker/layer2_controller.go ShouldAnnounce, externalTrafficPolicy
// Cluster, every node's speaker alive) picks want: the nodes sorted by
// sha256(node + "#" + address), the first wins.
func addressElecting(want string, nodes []string, pool netip.Prefix) netip.Addr {
	for a := pool.Addr().Next(); pool.Contains(a); a = a.Next() {
		if l2Winner(nodes, a) == want {
			return a
		}
	}
	panic(fmt.Sprintf("no address of %s elects %s among %v", pool, want, nodes))
}

// l2Winner is the node MetalLB's layer-2 election gives ip among nodes.
func l2Winner(nodes []string, ip netip.Addr) string {
	sorted := slices.Clone(nodes)
	sort.Slice(sorted, func(i, j int) bool {
		hi := sha256.Sum256([]byte(sorted[i] + "#" + ip.String()))
		hj := sha256.Sum256([]byte(sorted[j] + "#" + ip.String()))
		return bytes.Compare(hi[:], hj[:]) < 0
	})
	return sorted[0]
}

// startSpeakers runs the speaker as startSpeaker does, with memberlist on
// as MetalLB's release runs it (METALLB_ML_BIND_ADDR the pod's address,
// METALLB_ML_LABELS its labels, the key from a Secret memberlist the test
// makes, as MetalLB's controller would): memberlist is how a speaker learns
// that another node's speaker died — without it every node stays eligible
// and nobody takes over. It waits for a Ready speaker on each of nodes.
func (e *env) startSpeakers(t *testing.T, dir string, uplinks []string, nodes []cluster.Node) {
	t.Helper()
	ctx := context.Background()
	e.speakerConfig(t, dir, uplinks)
	key := make([]byte, 64)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.CoreV1().Secrets(speakerNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "memberlist"},
		Data:       map[string][]byte{"secretkey": []byte(hex.EncodeToString(key))},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "metallb-speaker", "speaker.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(bytes.ReplaceAll(raw, []byte("IMAGE"), []byte(speakerImage))), 4096).Decode(&ds); err != nil {
		t.Fatal(err)
	}
	pod := &ds.Spec.Template.Spec
	c := &pod.Containers[0]
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "METALLB_ML_BIND_ADDR", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		corev1.EnvVar{Name: "METALLB_ML_LABELS", Value: "app=metallb,component=speaker"},
		corev1.EnvVar{Name: "METALLB_ML_SECRET_KEY_PATH", Value: "/etc/ml_secret_key"},
	)
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "memberlist", MountPath: "/etc/ml_secret_key", ReadOnly: true})
	mode := int32(0o400)
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "memberlist", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "memberlist", DefaultMode: &mode}}})
	if _, err := e.client.AppsV1().DaemonSets(speakerNS).Create(ctx, &ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		e.logSpeakerOnFailure(t, e.speakerOn(t, n.Name, ""))
	}
}

// speakerOn waits for the speaker's pod on node to be Ready with a
// container other than not (a containerID), and returns it.
func (e *env) speakerOn(t *testing.T, node, not string) corev1.Pod {
	t.Helper()
	var ready corev1.Pod
	testenv.Eventually(t, 3*time.Minute, func() error {
		list, err := e.client.CoreV1().Pods(speakerNS).List(context.Background(), metav1.ListOptions{LabelSelector: "component=speaker"})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
				continue
			}
			if len(p.Status.ContainerStatuses) != 1 || !podReady(p) || p.Status.ContainerStatuses[0].ContainerID == not {
				return fmt.Errorf("speaker %s on %s: Ready %v, containers %v (want Ready, a container other than %q)", p.Name, node, podReady(p), p.Status.ContainerStatuses, not)
			}
			ready = p
			return nil
		}
		return fmt.Errorf("no speaker pod on %s", node)
	})
	return ready
}

// speakersJoined waits until the speaker on n1 logged, since (all its log
// when zero), that memberlist saw n2's speaker join: only then does n1's
// speaker count n2 among the living, and later learn of its death.
func (e *env) speakersJoined(t *testing.T, n1, n2 cluster.Node, since time.Time) {
	t.Helper()
	start := time.Now()
	s1 := e.speakerOn(t, n1.Name, "")
	testenv.Eventually(t, 3*time.Minute, func() error {
		opts := &corev1.PodLogOptions{}
		if !since.IsZero() {
			opts.SinceTime = &metav1.Time{Time: since.Add(-time.Second)}
		}
		raw, err := e.client.CoreV1().Pods(speakerNS).GetLogs(s1.Name, opts).DoRaw(context.Background())
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, "NodeJoin") && strings.Contains(line, `"`+n2.Name+`"`) {
				return nil
			}
		}
		return fmt.Errorf("speaker %s on %s has not logged memberlist's NodeJoin of %s yet", s1.Name, n1.Name, n2.Name)
	})
	t.Logf("memberlist: the speaker on %s saw %s's join (waited %s)", n1.Name, n2.Name, time.Since(start).Round(time.Millisecond))
}

// announcedFrom waits until the only ServiceL2Status of Service svc says
// node announces it on the LAN; onMiss runs at every miss.
func (e *env) announcedFrom(t *testing.T, ns, svc, node string, onMiss ...func()) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, func() error {
		got, err := e.l2StatusNodes(ns, svc)
		if err != nil {
			return err
		}
		if len(got) != 1 || got[0] != node {
			for _, f := range onMiss {
				f()
			}
			return fmt.Errorf("ServiceL2Status of %s/%s: nodes %v, want %s alone", ns, svc, got, node)
		}
		return nil
	})
}

// l2StatusNodes lists the nodes the speaker's ServiceL2Statuses of Service
// svc name.
func (e *env) l2StatusNodes(ns, svc string) ([]string, error) {
	list, err := e.dynamic.Resource(servicel2statusesGVR).Namespace(speakerNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var nodes []string
	for _, s := range list.Items {
		svcNS, _, _ := unstructured.NestedString(s.Object, "status", "serviceNamespace")
		name, _, _ := unstructured.NestedString(s.Object, "status", "serviceName")
		n, _, _ := unstructured.NestedString(s.Object, "status", "node")
		if svcNS == ns && name == svc {
			nodes = append(nodes, n)
		}
	}
	return nodes, nil
}

// ipamSees waits until ipam's ExplainService (`kubectl ipledger why`) says
// Service svc is announced by MetalLB L2 from node: the announcer tracker
// has seen the speaker's ServiceL2Status (the watcher streams MetalLB's
// kinds once its discovery, every 30 s, has found their CRDs), so that a
// change of node afterwards is one it can tell.
func (e *env) ipamSees(t *testing.T, ns, svc, node string) {
	t.Helper()
	ctx := context.Background()
	ipam, err := e.client.CoreV1().Services(systemNS).Get(ctx, "ipledger-ipam", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	api := ipamv1grpc.NewIPAMServiceClient(e.dialIPAM(t, ipam.Spec.ClusterIP+":9443", ""))
	start := time.Now()
	testenv.Eventually(t, 2*time.Minute, func() error {
		x, err := api.ExplainService(ctx, &ipamv1.ExplainServiceRequest{Service: &ipamv1.ServiceRef{Namespace: ns, Name: svc}})
		if err != nil {
			return err
		}
		for _, a := range x.GetAnnouncements() {
			if a.GetState() == "Announced" && a.GetNode() == node {
				return nil
			}
		}
		return fmt.Errorf("ipam says %v of %s/%s, want announced from node %s", x.GetAnnouncements(), ns, svc, node)
	})
	t.Logf("ipam sees %s/%s announced from %s (waited %s)", ns, svc, node, time.Since(start).Round(time.Millisecond))
}

// attempt is one request of a probe.
type attempt struct {
	start, end time.Time
	ok         bool
	mac        string
	err        string
}

// probe is a LAN client sending GET /hostname to an address one after the
// other, a new connection each, every 100 ms at most, until stopped; it
// never makes the client forget what ARP told it (a client on a LAN does
// not), and notes the hardware address the client's neighbour table holds
// after each answer.
type probe struct {
	mu       sync.Mutex
	attempts []attempt
	stop     chan struct{}
	done     chan struct{}
}

func startProbe(c *cluster.LANClient, ip netip.Addr, want string) *probe {
	p := &probe{stop: make(chan struct{}), done: make(chan struct{})}
	url := fmt.Sprintf("http://%s/hostname", netip.AddrPortFrom(ip, 80))
	go func() {
		defer close(p.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			a := attempt{start: time.Now()}
			var stderr bytes.Buffer
			cmd := c.Command(context.Background(), "curl", "-sS", "--noproxy", "*", "--connect-timeout", "1", "--max-time", "2", url)
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			a.end = time.Now()
			switch body := strings.TrimSpace(string(out)); {
			case err != nil:
				a.err = fmt.Sprintf("%v: %s", err, strings.TrimSpace(stderr.String()))
			case body != want:
				a.err = fmt.Sprintf("answered %q, want %s", body, want)
			default:
				a.ok = true
				if mac, _, err := c.Neighbour(ip); err == nil && mac != nil {
					a.mac = mac.String()
				}
			}
			p.mu.Lock()
			p.attempts = append(p.attempts, a)
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// Stop ends the probe and returns its attempts.
func (p *probe) Stop() []attempt {
	close(p.stop)
	<-p.done
	return p.snapshot()
}

func (p *probe) snapshot() []attempt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.attempts)
}

// answeredVia says whether the last n attempts, all started after since,
// were answered through the node of hardware address mac.
func answeredVia(attempts []attempt, since time.Time, mac net.HardwareAddr, n int) bool {
	if len(attempts) < n {
		return false
	}
	for _, a := range attempts[len(attempts)-n:] {
		if !a.ok || a.mac != mac.String() || a.start.Before(since) {
			return false
		}
	}
	return true
}

// recovery reads attempts after a failure at failed: the first answered
// request through mac (its end, from failed: the gap the client saw) and
// the requests that failed between (started after failed, or in flight
// then). ok is false when no request was answered through mac.
func recovery(attempts []attempt, failed time.Time, mac net.HardwareAddr) (gap time.Duration, lost int, ok bool) {
	for _, a := range attempts {
		if a.end.Before(failed) {
			continue
		}
		if a.ok && a.mac == mac.String() && a.start.After(failed) {
			return a.end.Sub(failed), lost, true
		}
		if !a.ok {
			lost++
		}
	}
	return 0, lost, false
}

// outage is how long the client went without an answer across a failure
// at failed: from the end of the last answered request before (or in flight
// at) it to the end of the first answered after it.
func outage(attempts []attempt, failed time.Time) time.Duration {
	var last time.Time
	for _, a := range attempts {
		if !a.ok {
			continue
		}
		if a.start.Before(failed) {
			last = a.end
		} else if !last.IsZero() {
			return a.end.Sub(last)
		}
	}
	return 0
}

// failNode runs one trial: the probe answered through n2, n2 fails
// (FailNode: host link down, kubelet and kube-proxy killed; its speaker's
// container killed; its LAN link down), and
// the probe must be answered through n1 within failoverBound; then the
// AnnouncerChanged Event from n2 to n1. It returns the gap (from the
// failure to the first answer through n1), the client's outage (from its
// last answer through n2), the requests lost and the speaker's container it
// killed.
func (e *env) failNode(t *testing.T, trial int, ns string, lan *cluster.LAN, client *cluster.LANClient, ip netip.Addr, n1, n2 cluster.Node, mac1, mac2 net.HardwareAddr) (gap, out time.Duration, lost int, killed string) {
	t.Helper()
	ctx := context.Background()
	speaker := e.speakerOn(t, n2.Name, "")
	killed = speaker.Status.ContainerStatuses[0].ContainerID
	p := startProbe(client, ip, "web")
	defer p.Stop()
	warm := time.Now()
	testenv.Eventually(t, time.Minute, func() error {
		if a := p.snapshot(); !answeredVia(a, warm, mac2, 5) {
			return fmt.Errorf("trial %d: the client is not answered through %s (%s) yet: last attempts %v", trial, n2.Name, mac2, lastAttempts(a, 3))
		}
		return nil
	})

	// Whatever happens next, the node is whole again when the test ends:
	// a node without its kubelet would hold the deletion of the speaker's
	// namespace (restoreNode does the same; both again do nothing:
	// RestoreNode refuses a node whose kubelet runs).
	t.Cleanup(func() {
		_ = lan.SetNodeLink(n2, true)
		_ = e.node.RestoreNode(context.Background(), n2.Name)
	})
	// The three at once, as a machine dies. The host and LAN links down
	// alone would cut the speaker off (no ARP reaches the LAN, no
	// memberlist probe reaches the other speaker), but it would run on,
	// partitioned: it would declare the first node's speaker dead and
	// announce everything on a link nobody hears, and memberlist would
	// have to heal the split when the links return. Killed, as a machine
	// losing its power kills it, it comes back fresh with its kubelet and
	// joins memberlist again as it did at the start.
	failed := time.Now()
	steps := map[string]func() error{
		"node failed":    func() error { return e.node.FailNode(n2.Name) },
		"speaker killed": func() error { return e.node.KillContainer(ctx, n2.Name, killed) },
		"LAN link down":  func() error { return lan.SetNodeLink(n2, false) },
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var took []string
	errs := map[string]error{}
	for what, f := range steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f()
			mu.Lock()
			defer mu.Unlock()
			errs[what] = err
			took = append(took, fmt.Sprintf("%s after %s", what, time.Since(failed).Round(time.Millisecond)))
		}()
	}
	wg.Wait()
	for what, err := range errs {
		if err != nil {
			t.Fatalf("trial %d: %s: %v", trial, what, err)
		}
	}
	t.Logf("trial %d: %s failed: %s (speaker %s)", trial, n2.Name, strings.Join(took, ", "), speaker.Name)

	err := testenv.Poll(failoverBound+20*time.Second, func() error {
		a := p.snapshot()
		var ok bool
		if gap, lost, ok = recovery(a, failed, mac1); !ok {
			return fmt.Errorf("trial %d: not answered through %s (%s) since %s failed %s ago: last attempts %v", trial, n1.Name, mac1, n2.Name, time.Since(failed).Round(time.Millisecond), lastAttempts(a, 3))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out = outage(p.snapshot(), failed)
	t.Logf("trial %d: answered through %s (%s) %s after the failure; %d requests lost; no answer for %s (the last through %s to the first through %s)",
		trial, n1.Name, mac1, gap.Round(time.Millisecond), lost, out.Round(time.Millisecond), n2.Name, n1.Name)
	if gap > failoverBound {
		t.Errorf("trial %d: the client went unanswered for %s after %s failed, more than %s (memberlist's defaults: see failoverBound)", trial, gap.Round(time.Millisecond), n2.Name, failoverBound)
	}
	e.announcedFrom(t, ns, "web", n1.Name)

	// issue 49: the failover across two nodes, told by ipam.
	want, before := "from node "+n1.Name+" since ", "(before: MetalLB L2 from node "+n2.Name+" since "
	testenv.Eventually(t, time.Minute, func() error {
		evs, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=AnnouncerChanged,involvedObject.name=web"})
		if err != nil {
			return err
		}
		var seen []string
		for _, ev := range evs.Items {
			seen = append(seen, ev.Message)
			if !eventTime(ev).Before(failed.Truncate(time.Second)) && strings.Contains(ev.Message, want) && strings.Contains(ev.Message, before) {
				t.Logf("trial %d: Event AnnouncerChanged: %s", trial, ev.Message)
				return nil
			}
		}
		return fmt.Errorf("trial %d: no AnnouncerChanged Event on web since %s saying %q … %q among %q", trial, failed.Format(time.RFC3339), want, before, seen)
	})
	return gap, out, lost, killed
}

// restoreNode brings the failed node back: its LAN link up, then
// RestoreNode (host link up, kubelet and kube-proxy started, the Node
// Ready; the kubelet restarts the speaker's container killed, found dead).
func (e *env) restoreNode(t *testing.T, lan *cluster.LAN, n cluster.Node, killed string) {
	t.Helper()
	if err := lan.SetNodeLink(n, true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.node.RestoreNode(context.Background(), n.Name); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s back: Ready after %s", n.Name, time.Since(start).Round(time.Millisecond))
	// The pod's status still names the killed container until the
	// kubelet reports again.
	next := e.speakerOn(t, n.Name, killed)
	t.Logf("%s back: its speaker %s Ready again %s after RestoreNode began (restarts %d)", n.Name, next.Name, time.Since(start).Round(time.Millisecond), next.Status.ContainerStatuses[0].RestartCount)
	e.logSpeakerOnFailure(t, next)
}

// ledgerVersions are the resourceVersions of ipam's ledger and history
// ConfigMaps, by name.
func (e *env) ledgerVersions(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, label := range []string{"ipledger.io/ledger=true", "ipledger.io/history=true"} {
		list, err := e.client.CoreV1().ConfigMaps(systemNS).List(context.Background(), metav1.ListOptions{LabelSelector: label})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range list.Items {
			out[cm.Name] = cm.ResourceVersion
		}
	}
	if len(out) == 0 {
		t.Fatalf("no ledger ConfigMaps in %s", systemNS)
	}
	return out
}

func lastAttempts(a []attempt, n int) []string {
	var out []string
	for _, x := range a[max(0, len(a)-n):] {
		if x.ok {
			out = append(out, fmt.Sprintf("%s ok via %s", x.start.Format("15:04:05.000"), x.mac))
		} else {
			out = append(out, fmt.Sprintf("%s failed: %s", x.start.Format("15:04:05.000"), x.err))
		}
	}
	return out
}
