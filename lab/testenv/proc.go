package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The /proc readings benchmarks report per process, read the same way for
// every process (the API server, etcd, the binaries under test, MetalLB):
// they need no metrics endpoint, and a peak (VmHWM) misses no short spike
// between two scrapes.

// ProcCPUSeconds is the user+system CPU time process pid has used
// (USER_HZ 100); ok is false when the process is gone.
func ProcCPUSeconds(pid int) (seconds float64, ok bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The fields after the command name (which may hold spaces): [11] utime,
	// [12] stime.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return float64(u+st) / 100, true
}

// ProcStatusBytes reads one kB field of /proc/<pid>/status (VmHWM, VmRSS,
// RssAnon, RssFile, ...), in bytes.
func ProcStatusBytes(pid int, field string) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	v, err := StatusBytes(raw, field)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	return v, nil
}

// StatusBytes reads one "Field:   123 kB" line of a /proc/<pid>/status text,
// in bytes.
func StatusBytes(status []byte, field string) (float64, error) {
	for line := range strings.Lines(string(status)) {
		rest, found := strings.CutPrefix(line, field+":")
		if !found {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
		if err != nil {
			return 0, fmt.Errorf("%s line %q: %w", field, strings.TrimSpace(line), err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no %s line in the process status", field)
}
