package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/testenv"
)

// variant is one ipam binary a benchmark runs: with
// IPLEDGER_BENCH_WITHOUT_HISTORY set, the benchmarks alternate, round by
// round and restart by restart, ipam as built (with the address history)
// and the same commit built without its history writer, so that what the
// history costs is measured in the same run, on the same API server, under
// the same load (BENCHMARKS.md, Address history).
type variant struct {
	name string
	bin  string
}

const withHistory = "with history"

// variants are the ipam binaries to alternate: ipam alone, or ipam and
// ipam without the history.
func variants(b *testing.B, env *testenv.Env) []variant {
	with := variant{name: withHistory, bin: env.Binary(b, "ipam")}
	if os.Getenv("IPLEDGER_BENCH_WITHOUT_HISTORY") == "" {
		return []variant{with}
	}
	return []variant{with, {name: "without history", bin: withoutHistoryBinary(b, env)}}
}

// profilePath is where a profile of this variant goes: path for ipam as
// built, path.without-history for the other, to compare with
// go tool pprof -base path.without-history path.
func (v variant) profilePath(path string) string {
	if v.name == withHistory {
		return path
	}
	return path + "." + strings.ReplaceAll(v.name, " ", "-")
}

// variantOf is the variant of the i-th round (or restart) of k: in the
// order A B B A A B B A …, so that a load that rises or falls through
// the run weighs on both alike (A B A B would give B every later slot).
func variantOf(i, k int) int {
	if k < 2 {
		return 0
	}
	return (i + i/2) % 2
}

var withoutHistory struct {
	once sync.Once
	bin  string
	err  string
}

// withoutHistoryEdit is what makes ipam's term run with no history writer:
// the worker's writer stays nil, and a nil *history.Writer takes every
// change and writes nothing (the methods the term calls are nil-safe for
// the workers of unit tests); its arguments are taken as ...any, so the
// edit needs no import the file may not have. Everything else — the ledger, its changes,
// the allocation loop — is the commit's own.
var withoutHistoryEdit = [2]string{
	"w.hist = history.Start(",
	"w.hist = func(...any) *history.Writer { return nil }(",
}

// withoutHistoryBinary builds, once per test binary, ipam at the checked-out
// commit (HEAD of the repository the benchmark runs in: commit the
// working tree first) without its history writer: a git worktree of HEAD
// in a temporary directory, withoutHistoryEdit applied to the file of
// ipam's controller package that starts the history writer, built as env.Binary builds (the worktree
// removed once built).
func withoutHistoryBinary(b *testing.B, env *testenv.Env) string {
	withoutHistory.once.Do(func() {
		ctx := context.Background()
		dir, err := os.MkdirTemp("", "ipam-without-history-")
		if err != nil {
			withoutHistory.err = err.Error()
			return
		}
		tree := filepath.Join(dir, "src")
		git := func(args ...string) error {
			out, err := exec.CommandContext(ctx, "git", append([]string{"-C", env.Root}, args...)...).CombinedOutput()
			if err != nil {
				withoutHistory.err = "git " + strings.Join(args, " ") + ": " + err.Error() + "\n" + string(out)
			}
			return err
		}
		if git("worktree", "add", "--detach", tree, "HEAD") != nil {
			return
		}
		defer func() {
			_ = git("worktree", "remove", "--force", tree)
			_ = os.RemoveAll(dir)
		}()
		path, src, err := startsHistory(filepath.Join(tree, "services/ipam/internal/controller"))
		if err != nil {
			withoutHistory.err = err.Error()
			return
		}
		edited := strings.Replace(string(src), withoutHistoryEdit[0], withoutHistoryEdit[1], 1)
		if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
			withoutHistory.err = err.Error()
			return
		}
		i := slices.IndexFunc(containerimage.Binaries, func(b containerimage.Binary) bool { return b.Name == "ipledger-ipam" })
		prov, err := containerimage.ReadProvenance(ctx, tree)
		if err != nil {
			withoutHistory.err = err.Error()
			return
		}
		prov.Revision += "-without-history"
		// Beside env.Binary's, which the test environment removes when it
		// stops.
		out := filepath.Join(filepath.Dir(env.Binary(b, "ipam")), "without-history")
		if err := containerimage.GoBuild(ctx, tree, out, runtime.GOARCH, prov, containerimage.Binaries[i:i+1]); err != nil {
			withoutHistory.err = err.Error()
			return
		}
		withoutHistory.bin = filepath.Join(out, "ipledger-ipam")
	})
	if withoutHistory.err != "" {
		b.Fatalf("ipam without the history: %s", withoutHistory.err)
	}
	return withoutHistory.bin
}

// startsHistory finds the one non-test file of ipam's controller package in
// dir that starts the history writer (withoutHistoryEdit[0], once), and
// returns its path and contents.
func startsHistory(dir string) (string, []byte, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", nil, err
	}
	var found []string
	var src []byte
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", nil, err
		}
		if n := strings.Count(string(b), withoutHistoryEdit[0]); n > 0 {
			found = append(found, fmt.Sprintf("%s (%d times)", filepath.Base(f), n))
			src = b
		}
	}
	if len(found) != 1 || strings.Count(string(src), withoutHistoryEdit[0]) != 1 {
		return "", nil, fmt.Errorf("%s: want one file that starts the history writer with %q once, found %v: change withoutHistoryEdit to what starts it now", dir, withoutHistoryEdit[0], found)
	}
	return filepath.Join(dir, strings.Fields(found[0])[0]), src, nil
}

// TestStartsHistoryFindsTheWriter holds withoutHistoryEdit to the code: the
// "without history" benchmark side edits the one line that starts ipam's
// history writer, and fails only once a 10,000-Service set-up has run if it
// cannot find it (it did, after the writer's start moved from controller.go
// to term.go) or if the edited file does not compile (it did not, when the
// edit named a package term.go does not import): the edit is applied
// through go build -overlay and the controller package compiled.
func TestStartsHistoryFindsTheWriter(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "controller"))
	if err != nil {
		t.Fatal(err)
	}
	path, src, err := startsHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(t.TempDir(), filepath.Base(path))
	overlay := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(edited, []byte(strings.Replace(string(src), withoutHistoryEdit[0], withoutHistoryEdit[1], 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(overlay, []byte(fmt.Sprintf(`{"Replace":{%q:%q}}`, path, edited)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", overlay, ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipam's controller package with %s edited (withoutHistoryEdit) does not compile: %v\n%s", filepath.Base(path), err, out)
	}
	t.Logf("the history writer starts in %s; the package compiles without it", path)
}
