package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
)

// statusWrites counts, in the API server's own metrics text, the requests
// that wrote a Service's status subresource (PUT, PATCH or server-side
// APPLY), split by whether the API server accepted them (2xx). Counting at
// the API server treats every controller alike: it sees the writes whatever
// client, verb or library made them.
func statusWrites(metrics []byte) (ok, refused float64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, found := strings.Cut(strings.TrimPrefix(line, "apiserver_request_total{"), "} ")
		if !found {
			return 0, 0, fmt.Errorf("apiserver_request_total sample %q: no closing brace", line)
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(v, `"`)
		}
		if l["resource"] != "services" || l["subresource"] != "status" || l["group"] != "" {
			continue
		}
		switch l["verb"] {
		case "PUT", "PATCH", "APPLY":
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("apiserver_request_total sample %q: %w", line, err)
		}
		if strings.HasPrefix(l["code"], "2") {
			ok += v
		} else {
			refused += v
		}
	}
	return ok, refused, sc.Err()
}

// apiStatusWrites reads statusWrites from the API server's /metrics.
func apiStatusWrites(tb testing.TB, client kubernetes.Interface) (ok, refused float64) {
	tb.Helper()
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		tb.Fatalf("read the API server's /metrics: %v", err)
	}
	ok, refused, err = statusWrites(raw)
	if err != nil {
		tb.Fatalf("the API server's /metrics: %v", err)
	}
	return ok, refused
}

// peakRSS is the VmHWM line of a /proc/<pid>/status text: the most resident
// memory the process ever had, in bytes. Read the same way for every
// process, it needs no metrics endpoint and misses no short peak between
// two scrapes.
func peakRSS(status []byte) (float64, error) {
	for line := range strings.SplitSeq(string(status), "\n") {
		rest, found := strings.CutPrefix(line, "VmHWM:")
		if !found {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
		if err != nil {
			return 0, fmt.Errorf("VmHWM line %q: %w", line, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no VmHWM line in the process status")
}

// processPeakRSS reads peakRSS of a running process.
func processPeakRSS(tb testing.TB, pid int) float64 {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatalf("read the peak RSS of process %d: %v", pid, err)
	}
	v, err := peakRSS(raw)
	if err != nil {
		tb.Fatalf("process %d: %v", pid, err)
	}
	return v
}

func TestStatusWrites(t *testing.T) {
	for _, tc := range []struct {
		name        string
		metrics     string
		ok, refused float64
	}{
		{name: "no samples", metrics: "# HELP apiserver_request_total x\n"},
		{
			name: "merge patches and updates of Service status, by code",
			metrics: `apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="status",verb="PATCH",version="v1"} 10000
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="status",verb="PUT",version="v1"} 250
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="status",verb="PUT",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="status",verb="APPLY",version="v1"} 1
`,
			ok: 10251, refused: 3,
		},
		{
			name: "other resources, subresources and verbs are not status writes",
			metrics: `apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="",verb="PUT",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="namespace",subresource="status",verb="LIST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="status",verb="GET",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="metallb.io",resource="services",scope="resource",subresource="status",verb="PUT",version="v1beta1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 7
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="status",verb="PATCH",version="v1"} 7
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, refused, err := statusWrites([]byte(tc.metrics))
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.ok || refused != tc.refused {
				t.Errorf("statusWrites = %v accepted, %v refused; want %v, %v", ok, refused, tc.ok, tc.refused)
			}
		})
	}
	if _, _, err := statusWrites([]byte(`apiserver_request_total{code="200",resource="services",subresource="status",verb="PUT"} many`)); err == nil {
		t.Error("statusWrites accepted a sample that is not a number")
	}
}

func TestPeakRSS(t *testing.T) {
	got, err := peakRSS([]byte("Name:\tipledger-ipam\nVmPeak:\t 1894712 kB\nVmHWM:\t   98304 kB\nVmRSS:\t   81920 kB\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 98304.0 * 1024; got != want {
		t.Errorf("peakRSS = %v, want %v (VmHWM, not VmRSS or VmPeak)", got, want)
	}
	if _, err := peakRSS([]byte("Name:\tx\nVmRSS:\t1 kB\n")); err == nil {
		t.Error("peakRSS found a peak in a status without VmHWM")
	}
}
