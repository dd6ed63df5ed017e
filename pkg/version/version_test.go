package version

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBuildInfoMetric: ipledger_build_info carries the release and the
// revision as labels, at 1.
func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Info{Version: "0.3.0", Revision: "abc123", GoVersion: "go1.27.3"}.Collector())
	want := `
# HELP ipledger_build_info The release (VERSION) and git revision this binary was built from; always 1.
# TYPE ipledger_build_info gauge
ipledger_build_info{goversion="go1.27.3",revision="abc123",version="0.3.0"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ipledger_build_info"); err != nil {
		t.Error(err)
	}
}

// TestUnstampedBuild: a binary built without Stamp's flags (this test's)
// says so rather than claiming a release.
func TestUnstampedBuild(t *testing.T) {
	if got := Get(); got.Version != Unstamped || got.Revision == "" || got.GoVersion == "" {
		t.Errorf("Get() = %+v, want version %q and a revision and Go version", got, Unstamped)
	}
}
