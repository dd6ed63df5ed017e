// This test-only package guards the split that buf.gen.yaml makes: the
// messages of every service proto are generated into one Go package
// (watcherv1, ipamv1, eipdv1) and its gRPC stubs into a sibling package
// (watcherv1grpc, ipamv1grpc, eipdv1grpc), so that code that needs only the
// messages does not link google.golang.org/grpc.
package proto_test

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const grpcPackage = "google.golang.org/grpc"

// pure are the packages that must not link gRPC, with why each is listed:
// the message packages themselves (everything else depends on them staying
// free of gRPC), and the packages that decide — plain Go that takes messages
// in and gives answers out, tested with tables (CONVENTIONS.md, "Decisions in
// pure packages"). The gRPC edge (servers, the stream client, the apps and
// controllers that gather inputs from the stream) may link gRPC, so it is not
// listed. A new decision package belongs here.
var pure = []string{
	// The generated messages.
	"github.com/ipledger/ipledger/proto/ipledger/watcher/v1",
	"github.com/ipledger/ipledger/proto/ipledger/ipam/v1",
	"github.com/ipledger/ipledger/proto/ipledger/eipd/v1",
	// The Kubernetes object → watcherv1.Object conversion the watcher streams.
	"github.com/ipledger/ipledger/pkg/convert",
	// The watcher's state of the world and the per-subscriber coalescing.
	"github.com/ipledger/ipledger/services/watcher/internal/store",
	"github.com/ipledger/ipledger/services/watcher/internal/coalesce",
	// ipam: which IP each Service gets, and the streamed objects turned into
	// the allocator's inputs.
	"github.com/ipledger/ipledger/services/ipam/internal/allocator",
	"github.com/ipledger/ipledger/services/ipam/internal/objects",
	// ipam: a pass's decisions and the term-start rebuild.
	"github.com/ipledger/ipledger/services/ipam/internal/plan",
	// endpoints: EndpointSlice packing, and an ExternalWorkload's readiness.
	"github.com/ipledger/ipledger/services/endpoints/internal/planner",
	"github.com/ipledger/ipledger/services/endpoints/internal/readiness",
	// eipd: orphan choice, and what eipd expects EC2 to show.
	"github.com/ipledger/ipledger/services/eipd/internal/decide",
	"github.com/ipledger/ipledger/services/eipd/internal/expect",
}

// stubs must link gRPC: they show that the check below sees it when it is there.
var stubs = []string{
	"github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc",
	"github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc",
	"github.com/ipledger/ipledger/proto/ipledger/eipd/v1/eipdv1grpc",
}

func TestPurePackagesDoNotLinkGRPC(t *testing.T) {
	if out, err := exec.Command("go", "env", "GOWORK").Output(); err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == "off" {
		t.Skip("needs the repository's go.work (the listed packages live in other modules)")
	}
	deps := goListDeps(t, append(slices.Clone(pure), stubs...))
	for _, p := range pure {
		if slices.Contains(deps[p], grpcPackage) {
			t.Errorf("%s links %s; it should need only the messages (import .../v1, not .../v1/<svc>v1grpc)", p, grpcPackage)
		}
	}
	for _, p := range stubs {
		if !slices.Contains(deps[p], grpcPackage) {
			t.Errorf("%s does not link %s: the check cannot see gRPC", p, grpcPackage)
		}
	}
}

// goListDeps returns the transitive non-test imports of each package; it
// fails the test when a package cannot be listed (renamed, removed).
func goListDeps(t *testing.T, pkgs []string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-f", "{{.ImportPath}}\t{{with .Error}}{{.Err}}{{end}}\t{{join .Deps \" \"}}"}, pkgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	deps := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		path, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		listErr, list, _ := strings.Cut(rest, "\t")
		if listErr != "" {
			t.Errorf("go list %s: %s", path, listErr)
			continue
		}
		deps[path] = strings.Fields(list)
	}
	for _, p := range pkgs {
		if _, ok := deps[p]; !ok {
			t.Errorf("go list did not list %s", p)
		}
	}
	return deps
}
