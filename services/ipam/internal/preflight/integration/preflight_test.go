// Package integration runs `ipledger-ipam preflight` (the built binary)
// against a real API server: a state the current code treats differently
// from what the Services' statuses and the ledger say, and what it lists.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const otherClass = "other.example.com/lb"

// report is the part of `preflight --output json` the test reads.
type report struct {
	Changes  []change `json:"changes"`
	Summary  []string `json:"summary"`
	ExitCode int      `json:"exitCode"`
}

type change struct {
	Namespace    string   `json:"namespace"`
	Name         string   `json:"name"`
	Change       string   `json:"change"`
	Moves        bool     `json:"moves"`
	IPsBefore    []string `json:"ipsBefore"`
	IPsAfter     []string `json:"ipsAfter"`
	ReasonBefore string   `json:"reasonBefore"`
	ReasonAfter  string   `json:"reasonAfter"`
	LedgerAfter  []string `json:"ledgerAfter"`
	Why          string   `json:"why"`
}

type fixture struct {
	t        *testing.T
	env      *testenv.Env
	ns, ns2  string
	ledgerNS string
	allocs   []ledger.Allocation
	// class is the lbClass served, pool the one IPPool, prefix its first
	// three octets ("10.77.0").
	class, pool, prefix string
}

func (f *fixture) service(ns, name, lbClass string, annotations map[string]string, ips []string, reason, message string, mutate ...func(*corev1.Service)) *corev1.Service {
	f.t.Helper()
	ctx := context.Background()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &lbClass,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}
	for _, m := range mutate {
		m(s)
	}
	out, err := f.env.Client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(ips) == 0 {
		return out
	}
	// The status an earlier ipam wrote: ingress, condition and the
	// allocated-from-pool annotation (kept by a status write).
	for _, ip := range ips {
		out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip, IPMode: ptr(corev1.LoadBalancerIPModeVIP)})
	}
	out.Status.Conditions = []metav1.Condition{{Type: "ipledger.io/AddressAllocated", Status: metav1.ConditionTrue, Reason: reason, Message: message,
		ObservedGeneration: out.Generation, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))}}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations["ipledger.io/allocated-from-pool"] = f.pool
	out, err = f.env.Client.CoreV1().Services(ns).UpdateStatus(ctx, out, metav1.UpdateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, ip := range ips {
		f.allocs = append(f.allocs, ledger.Allocation{IP: netip.MustParseAddr(ip), Pool: f.pool, SharingKey: annotations["ipledger.io/allow-shared-ip"],
			Service: ledger.ServiceRef{Namespace: ns, Name: name, UID: string(out.UID)}, AllocatedAt: time.Now().UTC().Add(-time.Hour).Truncate(time.Second)})
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// writeLedger writes the head shard with every allocation the fixture made.
func (f *fixture) writeLedger() {
	f.t.Helper()
	allocs := slices.Clone(f.allocs)
	slices.SortFunc(allocs, ledger.CompareAllocations)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ledger.HeadName, Namespace: f.ledgerNS, Labels: map[string]string{ledger.LabelKey: "true"}},
		Data:       ledger.Encode(ledger.Shard{Name: ledger.HeadName, Epoch: 3, Term: "ipam-0/1/old", Allocations: allocs}),
	}
	if _, err := f.env.Client.CoreV1().ConfigMaps(f.ledgerNS).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// versions are the resourceVersions of everything preflight reads, and the
// number of Events: what a run that writes nothing leaves as it found.
func (f *fixture) versions() map[string]string {
	f.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, ns := range []string{f.ns, f.ns2, f.ledgerNS} {
		svcs, err := f.env.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		for _, s := range svcs.Items {
			out["service "+ns+"/"+s.Name] = s.ResourceVersion
		}
		cms, err := f.env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		for _, c := range cms.Items {
			out["configmap "+ns+"/"+c.Name] = c.ResourceVersion
		}
		evs, err := f.env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		out["events "+ns] = fmt.Sprint(len(evs.Items))
	}
	pools, err := f.env.Dynamic.Resource(convert.IPPoolResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, p := range pools.Items {
		out["ippool "+p.GetName()] = p.GetResourceVersion()
	}
	return out
}

// preflight runs the binary and returns its report and exit code.
func (f *fixture) preflight(args ...string) (report, int) {
	f.t.Helper()
	bin := f.env.Binary(f.t, "ipam")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"preflight", "--kubeconfig", f.env.CP.KubeconfigPath, "--namespace", f.ledgerNS,
		"--lb-class", f.class, "--require-lb-class"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		f.t.Fatalf("preflight: %v\n%s", err, stderr.String())
	}
	var r report
	if slices.Contains(args, "json") {
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			f.t.Fatalf("preflight exited %d with output that is not JSON (%v):\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
		}
	} else {
		r.Summary = []string{stdout.String()}
	}
	f.t.Logf("preflight %s: exit %d\n%s\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return r, code
}

// listed renders the report's changes as "name change moves reasonAfter
// ipsBefore>ipsAfter", sorted.
func listed(r report) []string {
	var out []string
	for _, c := range r.Changes {
		out = append(out, fmt.Sprintf("%s %s moves=%v %s->%s %s>%s", c.Name, c.Change, c.Moves, c.ReasonBefore, c.ReasonAfter,
			strings.Join(c.IPsBefore, ","), strings.Join(c.IPsAfter, ",")))
	}
	sort.Strings(out)
	return out
}

// setup makes the state: pool f.pool of prefix.0/28, and Services that
// this version treats as their statuses say (correct), and otherwise.
func setup(t *testing.T, class, pool, prefix string) *fixture {
	env := testenv.Get(t)
	ctx := context.Background()
	f := &fixture{t: t, env: env, ns: env.Namespace(t, nil), ns2: env.Namespace(t, nil), ledgerNS: env.Namespace(t, nil),
		class: class, pool: pool, prefix: prefix}
	ip := func(n int) string { return fmt.Sprintf("%s.%d", prefix, n) }
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": pool, "finalizers": []any{"ipledger.io/pool-protection"}},
		"spec":     map[string]any{"addresses": []any{ip(0) + "/28"}},
	}}
	if _, err := env.Dynamic.Resource(convert.IPPoolResource).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pools := env.Dynamic.Resource(convert.IPPoolResource)
		_, _ = pools.Patch(ctx, pool, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = pools.Delete(ctx, pool, metav1.DeleteOptions{})
	})
	// No namespace controller deletes them: a later test (or -count run)
	// must not find them showing addresses and ipam's condition.
	t.Cleanup(func() {
		for _, ns := range []string{f.ns, f.ns2} {
			svcs, err := env.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Errorf("cleanup: %v", err)
				continue
			}
			for _, s := range svcs.Items {
				_ = env.Client.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{})
			}
		}
	})
	from := " from pool " + pool
	// Already right: listed by nobody.
	f.service(f.ns, "correct", class, nil, []string{ip(1)}, "Allocated", "Allocated "+ip(1)+from)
	// Holds an address the pool no longer covers: keeps it, HeldOutsidePool.
	f.service(f.ns, "outside", class, nil, []string{"10.99.0.5"}, "Allocated", "Allocated 10.99.0.5"+from)
	// Share one address across namespaces (on different ports) without the
	// opt-in: both keep it, HeldSharedAcrossNamespaces.
	share := map[string]string{"ipledger.io/allow-shared-ip": "k"}
	f.service(f.ns, "share-a", class, share, []string{ip(2)}, "Allocated", "Allocated "+ip(2)+from)
	f.service(f.ns2, "share-b", class, share, []string{ip(2)}, "Allocated", "Allocated "+ip(2)+from,
		func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 })
	// Holds .3 but requests .4: moved.
	f.service(f.ns, "moved", class, map[string]string{"ipledger.io/loadBalancerIPs": ip(4)}, []string{ip(3)}, "Allocated", "Allocated "+ip(3)+from)
	// Of another class (not ipam's under --require-lb-class), but shows
	// ipam's address: its address is taken back.
	f.service(f.ns, "not-ours", otherClass, nil, []string{ip(5)}, "Allocated", "Allocated "+ip(5)+from)
	// Pending: would get an address.
	f.service(f.ns, "pending", class, nil, nil, "", "")
	f.writeLedger()
	return f
}

func TestPreflight(t *testing.T) {
	f := setup(t, "preflight.ipledger.io/lb", "preflight-a", "10.77.0")
	env, ctx := f.env, context.Background()

	before := f.versions()
	r, code := f.preflight("--output", "json")
	if got := f.versions(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("preflight wrote something:\nbefore %v\nafter  %v", before, got)
	}
	want := []string{
		"moved AddressMoved moves=true Allocated->Allocated 10.77.0.3>10.77.0.4",
		"not-ours AddressRemoved moves=true Allocated-> 10.77.0.5>",
		"outside Condition moves=false Allocated->HeldOutsidePool 10.99.0.5>10.99.0.5",
		"pending AddressAdded moves=false ->Allocated >10.77.0.0",
		"share-a Condition moves=false Allocated->HeldSharedAcrossNamespaces 10.77.0.2>10.77.0.2",
		"share-b Condition moves=false Allocated->HeldSharedAcrossNamespaces 10.77.0.2>10.77.0.2",
	}
	if got := listed(r); !slices.Equal(got, want) {
		t.Errorf("listed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if code != 3 || r.ExitCode != 3 {
		t.Errorf("exit code %d (report says %d), want 3: an address would move or vanish", code, r.ExitCode)
	}
	for _, c := range r.Changes {
		if c.Why == "" {
			t.Errorf("%s: no reason given", c.Name)
		}
		if c.Name == "moved" && !strings.Contains(c.Why, "no longer fits") {
			t.Errorf("moved: the reason does not say why it moves: %s", c.Why)
		}
	}

	// The text form names the same Services.
	txt, code := f.preflight()
	if code != 3 {
		t.Errorf("text: exit code %d, want 3", code)
	}
	for _, name := range []string{"moved", "not-ours", "outside", "pending", "share-a", "share-b"} {
		if !strings.Contains(txt.Summary[0], "/"+name) {
			t.Errorf("text output does not name %s", name)
		}
	}
	if strings.Contains(txt.Summary[0], "/correct") {
		t.Errorf("text output names correct, which nothing changes")
	}

	// Without the Services whose addresses would move, nothing moves: exit
	// 0, unless --fail-on=any, which fails on any change of treatment. The
	// ledger entries of the deleted Services would be released.
	for _, name := range []string{"moved", "not-ours"} {
		if err := env.Client.CoreV1().Services(f.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r, code = f.preflight("--output", "json")
	if code != 0 || r.ExitCode != 0 {
		t.Errorf("after deleting the movers: exit code %d (report says %d), want 0", code, r.ExitCode)
	}
	want = []string{
		"moved LedgerReleased moves=false -> >",
		"not-ours LedgerReleased moves=false -> >",
		"outside Condition moves=false Allocated->HeldOutsidePool 10.99.0.5>10.99.0.5",
		"pending AddressAdded moves=false ->Allocated >10.77.0.0",
		"share-a Condition moves=false Allocated->HeldSharedAcrossNamespaces 10.77.0.2>10.77.0.2",
		"share-b Condition moves=false Allocated->HeldSharedAcrossNamespaces 10.77.0.2>10.77.0.2",
	}
	if got := listed(r); !slices.Equal(got, want) {
		t.Errorf("after deleting the movers, listed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, code := f.preflight("--output", "json", "--fail-on", "any"); code != 4 {
		t.Errorf("--fail-on=any: exit code %d, want 4", code)
	}
}

// TestPreflightAgreesWithATerm runs preflight, then the real ipam (binary,
// behind a real watcher) over the same state, and checks that every
// Service ends up with the addresses and condition reason preflight said,
// and the ledger with what it said: preflight and the leader do not drift.
func TestPreflightAgreesWithATerm(t *testing.T) {
	f := setup(t, "agree.ipledger.io/lb", "preflight-b", "10.78.0")
	env, ctx := f.env, context.Background()
	r, code := f.preflight("--output", "json")
	r.Changes = slices.DeleteFunc(r.Changes, func(c change) bool { return c.Namespace != f.ns && c.Namespace != f.ns2 })
	if code != 3 || len(r.Changes) != 6 {
		t.Fatalf("preflight: exit %d, %d changes; want 3 and the 6 of TestPreflight", code, len(r.Changes))
	}
	want := map[string]string{} // ns/name -> "ips reason | ledger ips"
	for _, ns := range []string{f.ns, f.ns2} {
		svcs, err := env.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range svcs.Items {
			ips, reason := treatment(&s)
			want[ns+"/"+s.Name] = strings.Join(ips, ",") + " " + reason + " | " + strings.Join(ips, ",")
		}
	}
	for _, c := range r.Changes {
		want[c.Namespace+"/"+c.Name] = strings.Join(c.IPsAfter, ",") + " " + c.ReasonAfter + " | " + strings.Join(c.LedgerAfter, ",")
	}

	watcherAddr := testenv.FreeAddr(t)
	testenv.StartProcess(t, "watcher", env.Binary(t, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", watcherAddr, "--grpc-plaintext", "--namespace", f.ledgerNS,
		"--ops-addr", testenv.FreeAddr(t), "--log-format", "text")
	testenv.StartProcess(t, "ipam", env.Binary(t, "ipam"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--namespace", f.ledgerNS, "--lb-class", f.class, "--require-lb-class", "--log-format", "text",
		"--watcher-addr", watcherAddr, "--watcher-token-file", env.TokenFile(t, testenv.SystemNamespace, "ipledger-ipam"), "--watcher-plaintext",
		"--grpc-addr", testenv.FreeAddr(t), "--grpc-plaintext", "--ops-addr", testenv.FreeAddr(t), "--leader-elect-identity", "ipam-0")
	testenv.Eventually(t, time.Minute, func() error {
		st, err := ledger.Read(ctx, env.Client, f.ledgerNS)
		if err != nil {
			return err
		}
		byService := map[string][]string{}
		for _, a := range st.Allocations {
			byService[a.Service.Key()] = append(byService[a.Service.Key()], a.IP.String())
		}
		var diffs []string
		for key, w := range want {
			ns, name, _ := strings.Cut(key, "/")
			s, err := env.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ips, reason := treatment(s)
			if got := strings.Join(ips, ",") + " " + reason + " | " + strings.Join(byService[key], ","); got != w {
				diffs = append(diffs, fmt.Sprintf("%s: %q, preflight said %q", name, got, w))
			}
		}
		sort.Strings(diffs)
		if len(diffs) > 0 {
			return errors.New(strings.Join(diffs, "; "))
		}
		return nil
	})
}

// treatment is what a Service's status shows: its ingress addresses and the
// reason of its ipledger.io/AddressAllocated condition.
func treatment(s *corev1.Service) (ips []string, reason string) {
	for _, in := range s.Status.LoadBalancer.Ingress {
		ips = append(ips, in.IP)
	}
	for _, c := range s.Status.Conditions {
		if c.Type == "ipledger.io/AddressAllocated" {
			reason = c.Reason
		}
	}
	return ips, reason
}
