package integration

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// Two ipam binaries running as the ipledger-ipam ServiceAccount (so its RBAC
// is exercised); the leader is SIGKILLed while it allocates. Every Service
// ends with exactly one IP, no IP is on two Services, and the ledger equals
// the union of the statuses. N is 300 by default; IPLEDGER_KILL_N=1000 runs
// the full size.
func TestKillLeaderWhileAllocating(t *testing.T) {
	n := 300
	if v, err := strconv.Atoi(os.Getenv("IPLEDGER_KILL_N")); err == nil && v > 0 {
		n = v
	}
	env := testenv.Get(t)
	ctx := context.Background()
	const ns = testenv.SystemNamespace // ipam's RBAC for its ledger and Lease is there
	svcNS := env.Namespace(t, nil)
	class := "test.ipledger.io/kill"

	watcherAddr := testenv.FreeAddr(t)
	testenv.StartProcess(t, "watcher", env.Binary(t, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", watcherAddr, "--grpc-plaintext", "--namespace", ns,
		"--ops-addr", testenv.FreeAddr(t), "--log-format", "text")
	kubeconfig := env.PodKubeconfig(t, ns, "ipledger-ipam") // ipam writes its ledger from a Pod
	tokenFile := env.TokenFile(t, ns, "ipledger-ipam")
	bin := env.Binary(t, "ipam")
	start := func(id string) *testenv.Process {
		return testenv.StartProcess(t, id, bin, nil,
			"--kubeconfig", kubeconfig, "--namespace", ns, "--lb-class", class, "--log-format", "text",
			"--watcher-addr", watcherAddr, "--watcher-token-file", tokenFile, "--watcher-plaintext",
			"--grpc-addr", testenv.FreeAddr(t), "--grpc-plaintext", "--ops-addr", testenv.FreeAddr(t),
			"--leader-elect-identity", id, "--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s",
			"--leader-elect-retry-period", "500ms")
	}
	// 10.78.0.0/21: 2,048 addresses, enough for the full size.
	h := &harness{t: t, env: env, ns: svcNS, class: class}
	t.Cleanup(h.deleteServices) // their statuses would block these addresses for later tests
	h.pool("tkill", "10.78.0.0/21")
	a := start("ipam-a")
	testenv.Eventually(t, wait, func() error {
		lease, err := env.Client.CoordinationV1().Leases(ns).Get(ctx, "ipledger-ipam", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "ipam-a" {
			return fmt.Errorf("lease holder %v", lease.Spec.HolderIdentity)
		}
		return nil
	})
	b := start("ipam-b")
	h.watchDuplicates()

	// Create the Services with 16 writers while ipam-a allocates.
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				s := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%04d", i), Namespace: svcNS},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, AllocateLoadBalancerNodePorts: new(false),
						Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
				}
				if _, err := env.Client.CoreV1().Services(svcNS).Create(ctx, s, metav1.CreateOptions{}); err != nil {
					t.Errorf("create: %v", err)
				}
			}
		}()
	}
	killed := false
	for i := range n {
		jobs <- i
		if i == n/2 {
			// Kill the leader once it is visibly allocating.
			testenv.Eventually(t, wait, func() error {
				if got := len(h.state().ips); got < n/8 {
					return fmt.Errorf("%d Services have an IP", got)
				}
				return nil
			})
			a.Kill()
			killed = true
		}
	}
	close(jobs)
	wg.Wait()
	if !killed {
		t.Fatal("never killed the leader")
	}
	begin := time.Now()
	testenv.Eventually(t, 5*time.Minute, func() error {
		st := h.state()
		if len(st.ips) != n {
			return fmt.Errorf("%d of %d Services have an IP", len(st.ips), n)
		}
		for name, ips := range st.ips {
			if len(ips) != 1 {
				return fmt.Errorf("%s has %v", name, ips)
			}
		}
		return nil
	})
	t.Logf("all %d Services had an IP %s after the last create (leader killed mid-way)", n, time.Since(begin).Round(time.Millisecond))
	st := h.state()
	if d := st.duplicates(); len(d) > 0 {
		t.Fatalf("duplicates: %v", d)
	}
	led, err := ledger.Read(ctx, env.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	var fromLedger, fromStatus []string
	for _, al := range led.Allocations {
		if al.Service.Namespace == svcNS {
			fromLedger = append(fromLedger, al.Service.Name+"="+al.IP.String())
		}
	}
	for name, ips := range st.ips {
		fromStatus = append(fromStatus, name+"="+ips[0])
	}
	sort.Strings(fromLedger)
	sort.Strings(fromStatus)
	if strings.Join(fromLedger, " ") != strings.Join(fromStatus, " ") {
		t.Fatalf("ledger (%d) != statuses (%d)", len(fromLedger), len(fromStatus))
	}
	if !strings.HasPrefix(led.Allocations[0].Pool, "tkill") {
		t.Errorf("pool = %q", led.Allocations[0].Pool)
	}
	head, _ := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if !strings.HasPrefix(head.Data["term"], "ipam-b/") {
		t.Errorf("ledger term %q, want ipam-b's", head.Data["term"])
	}
	if os.Getenv("IPLEDGER_SHOW_LOGS") != "" {
		t.Logf("ipam-a:\n%s\nipam-b:\n%s", a.Logs(), b.Logs())
	}
}
