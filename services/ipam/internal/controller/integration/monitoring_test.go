package integration

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipledger/ipledger/lab/testenv"
)

const oldestPending = "ipledger_ipam_oldest_pending_service_timestamp_seconds"

// TestOldestPendingServiceSurvivesANewLeader: the alert "a Service pending
// longer than N minutes" reads when the longest-waiting Service began to
// wait, by reason. It is the condition's lastTransitionTime, so a new leader
// reports the same instant instead of starting the clock again, and the
// series goes away once no Service waits for that reason.
func TestOldestPendingServiceSurvivesANewLeader(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("tpend-one", "10.78.5.1/32")
	h.service("a", nil)
	r := h.start("ipam-0")
	h.expect(wait, map[string]string{"a": "10.78.5.1"})
	if n, err := testutil.GatherAndCount(r.reg, oldestPending); err != nil || n != 0 {
		t.Fatalf("no Service waits, yet %d series of %s (%v)", n, oldestPending, err)
	}
	h.service("b", nil)
	h.expect(wait, map[string]string{"a": "10.78.5.1", "b": "PoolExhausted"})
	b, err := h.env.Client.CoreV1().Services(h.ns).Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var since time.Time
	for _, c := range b.Status.Conditions {
		if c.Type == "ipledger.io/AddressAllocated" {
			since = c.LastTransitionTime.Time
		}
	}
	exported := func(r *ipam) error {
		got := testenv.MetricValue(t, r.reg, oldestPending, map[string]string{"reason": "PoolExhausted"})
		// lastTransitionTime has a resolution of a second; the first
		// leader's clock started when it decided, up to a second before.
		if math.Abs(got-float64(since.Unix())) > 1 {
			return fmt.Errorf("%s{reason=PoolExhausted} = %v, want b's lastTransitionTime %d", oldestPending, got, since.Unix())
		}
		return nil
	}
	testenv.Eventually(t, wait, func() error { return exported(r) })

	// A new leader: the same instant, not the new term's start.
	time.Sleep(1100 * time.Millisecond) // the clocks must be able to differ (seconds)
	r.stop()
	r2 := h.start("ipam-1")
	testenv.Eventually(t, wait, func() error { return exported(r2) })

	// b gets the address a lets go: nothing waits, the series goes away.
	if err := h.env.Client.CoreV1().Services(h.ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(wait, map[string]string{"b": "10.78.5.1"})
	testenv.Eventually(t, wait, func() error {
		if n, err := testutil.GatherAndCount(r2.reg, oldestPending); err != nil || n != 0 {
			return fmt.Errorf("b holds an address, yet %d series of %s (%v)", n, oldestPending, err)
		}
		return nil
	})
}

// TestPoolStatusCountsAreIntegers: the API server accepts the counts as
// integers (the CRD's status schema), an IPv6 /64 is capped with the exact
// decimal beside it, and `kubectl get ippools` shows what is available and
// whether the pool is Conflicting.
func TestPoolStatusCountsAreIntegers(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("tcount-one", "10.78.6.0/30", "2001:db8:78:6::/64")
	// Overlaps tcount-one, which is older: Conflicting, serves nothing.
	h.pool("tcount-two", "10.78.6.2/31")
	h.service("a", nil)
	h.start("ipam-0")
	h.expect(wait, map[string]string{"a": "10.78.6.0"})
	family := func(pool, fam string) (map[string]any, error) {
		p, err := h.env.Dynamic.Resource(poolGVR()).Get(ctx, pool, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		m, _, _ := unstructured.NestedMap(p.Object, "status", fam)
		return m, nil
	}
	want := map[string]map[string]any{
		"ipv4": {"total": int64(4), "used": int64(1), "held": int64(1), "available": int64(3), "totalExact": "4", "availableExact": "3"},
		// The Subnet-Router anycast address (the first) is never handed out.
		"ipv6": {"total": int64(math.MaxInt64), "used": int64(0), "held": int64(0), "available": int64(math.MaxInt64),
			"totalExact": "18446744073709551615", "availableExact": "18446744073709551615"},
	}
	testenv.Eventually(t, wait, func() error {
		for fam, w := range want {
			got, err := family("tcount-one", fam)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(got, w) {
				return fmt.Errorf("status.%s = %#v, want %#v", fam, got, w)
			}
		}
		return nil
	})
	testenv.Eventually(t, wait, func() error {
		out, err := h.env.Kubectl(ctx, "get", "ippools", "tcount-one", "tcount-two")
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		header := strings.Fields(lines[0])
		wantHeader := []string{"NAME", "ADDRESSES", "AUTO", "IPV4", "AVAILABLE", "IPV6", "AVAILABLE", "READY", "CONFLICTING", "AGE"}
		if !slices.Equal(header, wantHeader) {
			return fmt.Errorf("kubectl get ippools header %q, want %q", lines[0], strings.Join(wantHeader, " "))
		}
		rows := map[string][]string{}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			rows[f[0]] = f
		}
		// NAME ADDRESSES AUTO IPV4-AVAILABLE IPV6-AVAILABLE READY CONFLICTING AGE
		if r := rows["tcount-one"]; len(r) != 8 || r[3] != "3" || r[4] != "9223372036854775807" || r[5] != "True" || r[6] != "False" {
			return fmt.Errorf("tcount-one row %q", r)
		}
		if r := rows["tcount-two"]; len(r) != 8 || r[5] != "False" || r[6] != "True" {
			return fmt.Errorf("tcount-two row %q", r)
		}
		return nil
	})
}
