package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// startBinary runs the ipam binary as a replica of the harness's Lease; it
// returns the process and the address of its metrics.
func (h *harness) startBinary(identity string, extra ...string) (*testenv.Process, string) {
	env := h.env
	ops := testenv.FreeAddr(h.t)
	args := append([]string{
		"--kubeconfig", env.CP.KubeconfigPath, "--namespace", h.ledgerNS, "--lb-class", h.class, "--log-format", "text",
		"--watcher-addr", h.addr, "--watcher-token-file", h.tok, "--watcher-plaintext",
		"--grpc-addr", testenv.FreeAddr(h.t), "--grpc-plaintext", "--ops-addr", ops,
		"--leader-elect-identity", identity, "--leader-elect-lease-name", h.lease, "--leader-elect-namespace", h.ledgerNS,
		"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms",
	}, extra...)
	return testenv.StartProcess(h.t, identity, env.Binary(h.t, "ipam"), nil, args...), ops
}

// scrape returns the value of the sample of a Prometheus text exposition
// that starts with prefix (name and labels), or 0.
func scrape(t *testing.T, addr, prefix string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

// backlog returns the Services of the test the ledger gives an IP that their
// status does not show yet: their status writes are still to come.
func (h *harness) backlog() (ledgerCount int, pending []string) {
	h.t.Helper()
	st, err := ledger.Read(context.Background(), h.env.Client, h.ledgerNS)
	if err != nil {
		h.t.Fatal(err)
	}
	shown := h.state().ips
	for _, a := range st.Allocations {
		if a.Service.Namespace != h.ns {
			continue
		}
		ledgerCount++
		if len(shown[a.Service.Name]) == 0 {
			pending = append(pending, a.Service.Name)
		}
	}
	return ledgerCount, pending
}

// watchEveryVersion fails the test if any version of the Services the API
// server stores, in the order it stores them, shows an IP on two Services:
// unlike a poller it cannot miss a duplicate that lasts a millisecond.
func (h *harness) watchEveryVersion() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := h.env.Client.CoreV1().Services(h.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	st := state{ips: map[string][]string{}}
	for _, s := range list.Items {
		st.ips[s.Name] = ingressIPs(&s)
	}
	w, err := h.env.Client.CoreV1().Services(h.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		h.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*corev1.Service)
			if !ok {
				if ctx.Err() == nil {
					h.t.Errorf("watch of the Services: %v", ev.Object)
				}
				return
			}
			if ev.Type == watch.Deleted {
				delete(st.ips, s.Name)
				continue
			}
			st.ips[s.Name] = ingressIPs(s)
			if d := st.duplicates(); len(d) > 0 {
				h.t.Errorf("version %s of %s shows an IP another Service shows: %v", s.ResourceVersion, s.Name, d)
			}
		}
	}()
	h.t.Cleanup(func() { cancel(); w.Stop(); <-done })
}

func ingressIPs(s *corev1.Service) []string {
	var out []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out
}

// The leader is paused (SIGSTOP) for longer than its Lease while Services
// are being created, at a moment it has status writes committed to the
// ledger but not sent yet. Meanwhile the Services it was about to write ask
// for other addresses, and as many new Services are created: the standby
// that takes over gives them the addresses it released. Resumed (SIGCONT),
// the old leader must not show any IP on a second Service: not in any
// version the API server stores (watched), nor for the 30 ms a poller can
// see; at the end every Service has one IP and the ledger equals the
// statuses.
func TestPausedLeaderDuringBurst(t *testing.T) {
	// The burst goes on until the leader is paused, up to limit Services.
	const limit = 400
	h := newHarness(t)
	ctx := context.Background()
	h.pool("tpause", "10.77.32.0/22") // the burst takes the lowest addresses, requests are for 10.77.35.x
	aID, bID := "ipam-a-"+h.lease, "ipam-b-"+h.lease
	// One status writer: the leader writes statuses well behind its ledger.
	// (With 4, a leader that commits and writes faster caught up with the
	// burst between two looks at the backlog, and the test never found a
	// moment to pause it.)
	a, aOps := h.startBinary(aID, "--status-workers", "1")
	h.waitForHolder(aID)
	h.startBinary(bID)
	h.watchDuplicates()
	h.watchEveryVersion()

	create := func(name string) {
		class := h.class
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, AllocateLoadBalancerNodePorts: new(false),
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
		}
		if _, err := h.env.Client.CoreV1().Services(h.ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Errorf("create: %v", err)
		}
	}
	var wg sync.WaitGroup
	jobs := make(chan string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range jobs {
				create(name)
			}
		}()
	}
	produced := make(chan int)
	stopBurst := make(chan struct{})
	go func() {
		i := 0
		defer func() { produced <- i }()
		for ; i < limit; i++ {
			select {
			case jobs <- fmt.Sprintf("s%03d", i):
			case <-stopBurst:
				return
			}
		}
	}()

	// Pause the leader at a moment the ledger is ahead of the statuses (if
	// the statuses caught up in between, resume it at once and try again:
	// it was paused for less than its Lease).
	pid := a.PID()
	var (
		stale   []string
		paused  time.Time
		resumed = true
	)
	defer func() {
		if !resumed {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	testenv.Eventually(t, wait, func() error {
		count, pending := h.backlog()
		if count < 20 || len(pending) < 3 {
			return fmt.Errorf("ledger holds %d, %d not shown yet", count, len(pending))
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		paused, resumed = time.Now(), false
		if _, stale = h.backlog(); len(stale) > 0 {
			return nil
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		resumed = true
		return fmt.Errorf("the statuses caught up before the leader was paused")
	})
	t.Logf("paused the leader with %d status writes committed but not shown", len(stale))

	// The Services whose writes are pending ask for addresses of their own;
	// once the next leader has moved them, new Services come and take the
	// addresses they held.
	moved := stale[:min(len(stale), 64)]
	requested := map[string]string{}
	for i, name := range moved {
		ip := netip.AddrFrom4([4]byte{10, 77, 35, byte(i)}).String()
		requested[name] = ip
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"ipledger.io/loadBalancerIPs":%q}}}`, ip)
		if _, err := h.env.Client.CoreV1().Services(h.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	close(stopBurst)
	n := <-produced
	testenv.Eventually(t, wait, func() error {
		if term := h.ledgerTerm(); !strings.HasPrefix(term, bID+"/") {
			return fmt.Errorf("ledger term %q", term)
		}
		st := h.state()
		if len(st.ips) != n {
			return fmt.Errorf("%d of %d Services have an IP", len(st.ips), n)
		}
		for name, ip := range requested {
			if got := strings.Join(st.ips[name], ","); got != ip {
				return fmt.Errorf("%s shows %q, want %s", name, got, ip)
			}
		}
		return nil
	})
	for i := range moved {
		jobs <- fmt.Sprintf("t%03d", i)
	}
	close(jobs)
	wg.Wait()
	total := n + len(moved)
	testenv.Eventually(t, wait, func() error {
		if got := len(h.state().ips); got != total {
			return fmt.Errorf("%d of %d Services have an IP", got, total)
		}
		return nil
	})
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	t.Logf("resumed the leader after %s", time.Since(paused).Round(time.Millisecond))

	testenv.Eventually(t, wait, func() error {
		st := h.state()
		if len(st.ips) != total {
			return fmt.Errorf("%d of %d Services have an IP", len(st.ips), total)
		}
		for name, ips := range st.ips {
			if len(ips) != 1 {
				return fmt.Errorf("%s shows %v", name, ips)
			}
			if want, ok := requested[name]; ok && ips[0] != want {
				return fmt.Errorf("%s shows %s, want its requested %s", name, ips[0], want)
			}
		}
		return nil
	})
	testenv.Eventually(t, wait, func() error {
		if !strings.Contains(a.Logs(), "Lost the lease") {
			return fmt.Errorf("the resumed leader has not stopped its term")
		}
		return nil
	})
	h.ledgerEqualsStatuses()
	if d := h.state().duplicates(); len(d) > 0 {
		t.Fatalf("duplicates: %v", d)
	}
	t.Logf("status writes of the resumed leader refused as conflicts: %v",
		scrape(t, aOps, `ipledger_ipam_status_writes_total{result="conflict"}`))
}
