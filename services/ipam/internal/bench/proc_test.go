package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/ipledger/ipledger/lab/testenv"
)

// loadavg is the first three fields of /proc/loadavg (what uptime shows):
// the machine is shared, and every figure is recorded with its load.
func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuUse is the CPU time of named processes, read at the start and the end
// of a phase.
type cpuUse struct {
	pids  map[string]int
	names []string
	start map[string]float64
}

func newCPUUse() *cpuUse { return &cpuUse{pids: map[string]int{}} }

// add names a process to account for.
func (c *cpuUse) add(name string, pid int) {
	if _, ok := c.pids[name]; !ok {
		c.names = append(c.names, name)
	}
	c.pids[name] = pid
}

// begin reads every process's CPU time at the start of a phase.
func (c *cpuUse) begin() {
	c.start = map[string]float64{}
	for name, pid := range c.pids {
		c.start[name], _ = testenv.ProcCPUSeconds(pid)
	}
}

// since returns the CPU seconds each process used since begin.
func (c *cpuUse) since() map[string]float64 {
	out := map[string]float64{}
	for name, pid := range c.pids {
		now, _ := testenv.ProcCPUSeconds(pid)
		out[name] = now - c.start[name]
	}
	return out
}

// format prints used in the order the processes were added.
func (c *cpuUse) format(used map[string]float64) string {
	var parts []string
	for _, name := range c.names {
		parts = append(parts, fmt.Sprintf("%s %.1f", name, used[name]))
	}
	return strings.Join(parts, ", ")
}

// scrape reads one sample from a Prometheus text endpoint (0 if absent).
func scrape(ctx context.Context, addr, metric string) float64 {
	// Only the metric's family (promhttp's name[] filter), uncompressed:
	// the benchmark polls ipam's counters every 50 ms, and encoding every
	// family, or gzip, would be most of what that costs ipam.
	// A histogram's _count and _sum samples belong to the family without
	// the suffix.
	name, _, _ := strings.Cut(metric, "{")
	families := []string{name}
	for _, suffix := range []string{"_count", "_sum", "_bucket"} {
		if f, ok := strings.CutSuffix(name, suffix); ok {
			families = append(families, f)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics?"+url.Values{"name[]": families}.Encode(), nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), metric+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
