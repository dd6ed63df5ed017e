package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// statusWrites returns ipam's Service status writes counted with result.
func (r *ipam) statusWrites(t *testing.T, result string) float64 {
	t.Helper()
	families, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "ipledger_ipam_status_writes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// foreignCondition is what another controller (a cloud provider, a policy
// engine) keeps on the Service.
func foreignCondition(typ string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "Checked", Message: "set by another controller",
		LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}
}

// addCondition writes a condition as another controller does: read, append,
// UpdateStatus (a compare-and-swap on the resourceVersion it read).
func (h *harness) addCondition(name string, c metav1.Condition) {
	h.t.Helper()
	ctx := context.Background()
	s, err := h.env.Client.CoreV1().Services(h.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	s.Status.Conditions = append(s.Status.Conditions, c)
	if _, err := h.env.Client.CoreV1().Services(h.ns).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) conditionTypes(name string) []string {
	h.t.Helper()
	s, err := h.env.Client.CoreV1().Services(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, c := range s.Status.Conditions {
		out = append(out, c.Type)
	}
	return out
}

// Another controller's conditions on a Service survive ipam's writes: one
// ipam's stream has seen (on t), and one written while the stream lags (on s,
// with the watcher paused): ipam's write based on the version it has seen is
// refused with a Conflict, counted as such, and made again once the stream
// shows the new version.
func TestForeignConditionsSurviveIpamWrites(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	z := netip.MustParseAddr("10.77.16.8")
	h.pool("tforeign", "10.77.16.1/32", z.String()+"/32")
	h.service("t", nil)
	h.addCondition("t", foreignCondition("example.com/Seen"))
	r := h.start("ipam-0")
	h.expect(wait, map[string]string{"t": "10.77.16.1"})
	if got := strings.Join(h.conditionTypes("t"), ","); got != "example.com/Seen,ipledger.io/AddressAllocated" {
		t.Fatalf("t has conditions %s after ipam's write, want the other controller's kept", got)
	}

	testenv.Eventually(t, wait, func() error {
		_, err := r.ctrl.Reserve(ctx, ledger.Reservation{IP: z, Note: "held by the test", CreatedAt: time.Now()})
		return err
	})
	h.service("s", nil)
	h.expect(wait, map[string]string{"s": "PoolExhausted"})

	// Pause the watcher: ipam's view of s stops at the version it has.
	if err := syscall.Kill(h.watcher.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(h.watcher.PID(), syscall.SIGCONT)
		}
	}()
	h.addCondition("s", foreignCondition("example.com/Unseen"))
	if _, err := r.ctrl.Unreserve(ctx, z); err != nil {
		t.Fatal(err)
	}
	// ipam decides s again (z is free now) from the version it has seen.
	testenv.Eventually(t, wait, func() error {
		if n := r.statusWrites(t, "conflict"); n > 0 {
			return nil
		}
		if ips := h.state().ips["s"]; len(ips) > 0 {
			return nil // the write landed (it must not have dropped the condition)
		}
		return fmt.Errorf("ipam has not written s yet")
	})
	if err := syscall.Kill(h.watcher.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	h.expect(wait, map[string]string{"s": z.String()})
	if got := strings.Join(h.conditionTypes("s"), ","); got != "ipledger.io/AddressAllocated,example.com/Unseen" {
		t.Errorf("s has conditions %s, want ipam's updated in place and the other controller's kept", got)
	}
	if n := r.statusWrites(t, "conflict"); n == 0 {
		t.Errorf("no status write was counted as a conflict")
	}
}

// stallingTransport sits between one in-process ipam and the API server. It
// can hold Service status writes as a slow API priority level queues them
// (the caller gives up when its context ends, but the request is still
// delivered later, on release) and fail every Lease request (the replica
// cannot renew, as if it were paused).
type stallingTransport struct {
	next http.RoundTripper

	mu         sync.Mutex
	holdStatus bool
	failLeases bool
	held       []heldRequest
}

type heldRequest struct {
	req  *http.Request
	body []byte
}

func (s *stallingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	hold := s.holdStatus && req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/services/") && strings.HasSuffix(req.URL.Path, "/status")
	fail := s.failLeases && strings.Contains(req.URL.Path, "/leases")
	s.mu.Unlock()
	switch {
	case fail:
		return nil, errors.New("the test cuts this replica off from its Lease")
	case hold:
		var body []byte
		if req.Body != nil {
			b, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			body = b
		}
		s.mu.Lock()
		s.held = append(s.held, heldRequest{req: req.Clone(context.Background()), body: body})
		s.mu.Unlock()
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return s.next.RoundTrip(req)
}

func (s *stallingTransport) set(holdStatus, failLeases bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdStatus, s.failLeases = holdStatus, failLeases
}

func (s *stallingTransport) heldPaths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.held {
		out = append(out, r.req.URL.Path)
	}
	return out
}

// release delivers the held requests now and returns their HTTP status
// codes and response bodies.
func (s *stallingTransport) release(t *testing.T) (codes []int, bodies []string) {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.holdStatus = false
	s.mu.Unlock()
	for _, r := range held {
		r.req.Body = io.NopCloser(bytes.NewReader(r.body))
		resp, err := s.next.RoundTrip(r.req)
		if err != nil {
			t.Fatalf("deliver the held request %s: %v", r.req.URL.Path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		bodies = append(bodies, string(b))
	}
	return codes, bodies
}

func (h *harness) stallingClient() (kubernetes.Interface, *stallingTransport) {
	h.t.Helper()
	st := &stallingTransport{}
	cfg := rest.CopyConfig(h.env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		st.next = rt
		return st
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	return client, st
}

// A leader commits v→X to the ledger, but its status write of v is stalled
// (a paused process, a slow API priority level) until after it lost its
// term and the next leader moved X to another Service. Delivered then, the
// write must be refused: it was decided on a version of v that is no longer
// current.
func TestStalledStatusWriteCannotLandAfterItsTerm(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("tstall", "10.77.15.0/30") // .0 to .3
	h.watchDuplicates()
	client, stall := h.stallingClient()
	h.startWith("ipam-a", client)
	h.waitForHolder("ipam-a")
	h.service("s0", nil)
	h.service("s1", nil)
	h.expect(wait, map[string]string{"s0": "10.77.15.0", "s1": "10.77.15.1"})

	stall.set(true, false)
	h.service("v", nil)
	testenv.Eventually(t, wait, func() error {
		if len(stall.heldPaths()) == 0 {
			return fmt.Errorf("ipam-a has not written v's status yet")
		}
		return nil
	})
	if got := stall.heldPaths(); len(got) != 1 || !strings.HasSuffix(got[0], "/services/v/status") {
		t.Fatalf("held writes %v, want only v's status", got)
	}
	st, err := ledger.Read(ctx, h.env.Client, h.ledgerNS)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(st, h.ns); got != "s0=10.77.15.0 s1=10.77.15.1 v=10.77.15.2" {
		t.Fatalf("ledger %s, want v=10.77.15.2 committed before its status", got)
	}

	// ipam-a loses its Lease; ipam-b takes over, writes v's status and then,
	// as v asks for another address, moves 10.77.15.2 to w.
	stall.set(true, true)
	h.start("ipam-b")
	h.waitForHolder("ipam-b")
	h.expect(wait, map[string]string{"v": "10.77.15.2"})
	patch := []byte(`{"metadata":{"annotations":{"ipledger.io/loadBalancerIPs":"10.77.15.3"}}}`)
	if _, err := h.env.Client.CoreV1().Services(h.ns).Patch(ctx, "v", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(wait, map[string]string{"v": "10.77.15.3"})
	h.service("w", nil)
	h.expect(wait, map[string]string{"w": "10.77.15.2"})

	codes, bodies := stall.release(t)
	if len(codes) != 1 || codes[0] != http.StatusConflict {
		t.Errorf("ipam-a's stalled status write of v was answered %v %v, want 409 Conflict", codes, bodies)
	}
	h.expect(wait, map[string]string{"s0": "10.77.15.0", "s1": "10.77.15.1", "v": "10.77.15.3", "w": "10.77.15.2"})
	h.ledgerEqualsStatuses()
	var svc *corev1.Service
	if svc, err = h.env.Client.CoreV1().Services(h.ns).Get(ctx, "v", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(svc.Status.LoadBalancer.Ingress); n != 1 {
		t.Errorf("v shows %v", svc.Status.LoadBalancer.Ingress)
	}
}

func keysOf(st ledger.State, ns string) string {
	var out []string
	for _, a := range st.Allocations {
		if a.Service.Namespace == ns {
			out = append(out, a.Service.Name+"="+a.IP.String())
		}
	}
	return strings.Join(out, " ")
}
