package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/testenv"
)

// request is one kind of API request as the API server's
// apiserver_request_total counts it.
type request struct {
	group, resource, subresource, verb string
	accepted                           bool // a 2xx answer
}

func (r request) String() string {
	res := r.resource
	if r.group != "" {
		res += "." + r.group
	}
	if r.subresource != "" {
		res += "/" + r.subresource
	}
	if !r.accepted {
		res += " (refused)"
	}
	return r.verb + " " + res
}

// requestCounts reads every apiserver_request_total sample of the API
// server's own metrics text. Counting at the API server treats every
// controller alike: it sees the requests whatever client, verb or library
// made them.
func requestCounts(metrics []byte) (map[request]float64, error) {
	out := map[request]float64{}
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, found := strings.Cut(strings.TrimPrefix(line, "apiserver_request_total{"), "} ")
		if !found {
			return nil, fmt.Errorf("apiserver_request_total sample %q: no closing brace", line)
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(v, `"`)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("apiserver_request_total sample %q: %w", line, err)
		}
		out[request{group: l["group"], resource: l["resource"], subresource: l["subresource"], verb: l["verb"],
			accepted: strings.HasPrefix(l["code"], "2")}] += v
	}
	return out, sc.Err()
}

// statusWrites counts the requests that wrote a Service's status
// subresource (PUT, PATCH or server-side APPLY), split by whether the API
// server accepted them.
func statusWrites(metrics []byte) (ok, refused float64, err error) {
	counts, err := requestCounts(metrics)
	if err != nil {
		return 0, 0, err
	}
	for r, v := range counts {
		if r.resource != "services" || r.subresource != "status" || r.group != "" {
			continue
		}
		switch r.verb {
		case "PUT", "PATCH", "APPLY":
		default:
			continue
		}
		if r.accepted {
			ok += v
		} else {
			refused += v
		}
	}
	return ok, refused, nil
}

// apiMetrics reads the API server's /metrics.
func apiMetrics(tb testing.TB, client kubernetes.Interface) []byte {
	tb.Helper()
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		tb.Fatalf("read the API server's /metrics: %v", err)
	}
	return raw
}

// apiStatusWrites reads statusWrites from the API server's /metrics.
func apiStatusWrites(tb testing.TB, client kubernetes.Interface) (ok, refused float64) {
	tb.Helper()
	ok, refused, err := statusWrites(apiMetrics(tb, client))
	if err != nil {
		tb.Fatalf("the API server's /metrics: %v", err)
	}
	return ok, refused
}

// apiWrites reads the API server's write requests so far (every verb but
// GET, LIST and WATCH), by kind.
func apiWrites(tb testing.TB, client kubernetes.Interface) map[request]float64 {
	tb.Helper()
	counts, err := requestCounts(apiMetrics(tb, client))
	if err != nil {
		tb.Fatalf("the API server's /metrics: %v", err)
	}
	maps.DeleteFunc(counts, func(r request, _ float64) bool {
		return r.verb == "GET" || r.verb == "LIST" || r.verb == "WATCH"
	})
	return counts
}

// writesSince formats the writes of now that were not in before, most
// first: "PATCH services/status 10000, POST events 1021".
func writesSince(before, now map[request]float64) string {
	type count struct {
		r request
		n float64
	}
	var out []count
	for r, v := range now {
		if d := v - before[r]; d > 0 {
			out = append(out, count{r, d})
		}
	}
	slices.SortFunc(out, func(a, b count) int { return cmp.Or(cmpFloat(b.n, a.n), strings.Compare(a.r.String(), b.r.String())) })
	parts := make([]string, len(out))
	for i, c := range out {
		parts[i] = fmt.Sprintf("%s %.0f", c.r, c.n)
	}
	return strings.Join(parts, ", ")
}

// processPeakRSS reads the most resident memory a running process ever had
// (VmHWM), in bytes.
func processPeakRSS(tb testing.TB, pid int) float64 {
	tb.Helper()
	v, err := testenv.ProcStatusBytes(pid, "VmHWM")
	if err != nil {
		tb.Fatalf("read the peak RSS of process %d: %v", pid, err)
	}
	return v
}

// residentSplit formats a running process's resident memory now: its
// anonymous pages (heap, stacks) and its file-backed pages (the binary).
func residentSplit(pid int) string {
	anon, err1 := testenv.ProcStatusBytes(pid, "RssAnon")
	file, err2 := testenv.ProcStatusBytes(pid, "RssFile")
	if err := errors.Join(err1, err2); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("anonymous %.0f MB, file-backed %.0f MB", anon/1e6, file/1e6)
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

func TestWritesSince(t *testing.T) {
	metrics := func(s string) map[request]float64 {
		t.Helper()
		counts, err := requestCounts([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return counts
	}
	before := metrics(`apiserver_request_total{code="200",group="",resource="services",subresource="status",verb="PATCH"} 5
apiserver_request_total{code="201",group="",resource="events",subresource="",verb="POST"} 2
`)
	now := metrics(`apiserver_request_total{code="200",group="",resource="services",subresource="status",verb="PATCH"} 10005
apiserver_request_total{code="409",group="",resource="services",subresource="status",verb="PATCH"} 3
apiserver_request_total{code="201",group="",resource="events",subresource="",verb="POST"} 1002
apiserver_request_total{code="200",group="coordination.k8s.io",resource="leases",subresource="",verb="PUT"} 0
`)
	want := "PATCH services/status 10000, POST events 1000, PATCH services/status (refused) 3"
	if got := writesSince(before, now); got != want {
		t.Errorf("writesSince = %q, want %q", got, want)
	}
}
