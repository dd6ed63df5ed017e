// Package version is the release an ipledger binary was built from: the
// project's VERSION file and the git commit, stamped at build time with
// `-ldflags -X` (Stamp gives the flags; `make images`, the Dockerfile,
// `make up` and hack/vulncheck.sh all use them). It answers --version, the
// startup log line and the ipledger_build_info metric.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Set by the linker (Stamp); empty in a build that was not stamped, such as
// `go test` or a plain `go build`.
var (
	version  string
	revision string
)

// Unstamped is the version of a binary built without Stamp's flags.
const Unstamped = "0.0.0-unstamped"

// Info is what a binary was built from.
type Info struct {
	// Version is the release, semver without a leading "v" (VERSION), or
	// Unstamped.
	Version string
	// Revision is the git commit, with "-dirty" when the work tree had
	// uncommitted changes; from Go's own VCS stamp when the linker set none,
	// "unknown" when neither knows.
	Revision string
	// GoVersion is the Go release that built the binary.
	GoVersion string
}

// Get is this binary's Info.
func Get() Info {
	i := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if i.Version == "" {
		i.Version = Unstamped
	}
	if i.Revision == "" {
		i.Revision = vcsRevision()
	}
	return i
}

// vcsRevision is the commit Go's build stamped (-buildvcs), "unknown" if none.
func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// String is the --version line of binary, e.g.
// "ipledger-ipam 0.3.0 (revision 5c27564…, go1.27.3)".
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}

// LogAttrs are the key-value pairs of the startup log line.
func (i Info) LogAttrs() []any {
	return []any{"version", i.Version, "revision", i.Revision, "goVersion", i.GoVersion}
}

// Stamp is the -X flags that make Get report v and rev (go build -ldflags
// "-s -w " + Stamp(v, rev)).
func Stamp(v, rev string) string {
	const pkg = "github.com/ipledger/ipledger/pkg/version"
	return fmt.Sprintf("-X %s.version=%s -X %s.revision=%s", pkg, v, pkg, rev)
}

// Collector exports ipledger_build_info{version,revision,goversion} = 1, the
// usual build-info gauge: join it to any series by instance to see which
// release a replica runs (during a rolling upgrade, both).
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "ipledger_build_info",
		Help:        "The release (VERSION) and git revision this binary was built from; always 1.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
