package containerimage

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGoToolchainIsOneVersion keeps the Go toolchain one version everywhere
// (docs/security.md, "Supply chain"): the GOTOOLCHAIN that hack/lib/go.sh and
// the Makefile export, the go line of go.work and of every module it uses,
// and the Dockerfile's golang:<major.minor>. A machine's own Go does not
// switch to the go.work version by itself, so .ci/run and every hack/ script
// source hack/lib/go.sh before running go. hack/tools' modules are left out:
// their go.mod and go.sum are the keys of the tools' caches.
func TestGoToolchainIsOneVersion(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(name string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	find := func(name, pattern string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)` + pattern).FindStringSubmatch(read(name))
		if m == nil {
			t.Fatalf("%s has no line matching %s", name, pattern)
		}
		return m[1]
	}

	toolchain := find("hack/lib/go.sh", `^export GOTOOLCHAIN=(go\S+)$`)
	version := strings.TrimPrefix(toolchain, "go")
	if got := find("Makefile", `^export GOTOOLCHAIN := (\S+)$`); got != toolchain {
		t.Errorf("the Makefile exports GOTOOLCHAIN %s, hack/lib/go.sh %s", got, toolchain)
	}
	work := read("go.work")
	if got := find("go.work", `^go (\S+)$`); got != version {
		t.Errorf("go.work says go %s, hack/lib/go.sh GOTOOLCHAIN=%s", got, toolchain)
	}
	uses := regexp.MustCompile(`(?s)use \((.*?)\)`).FindStringSubmatch(work)
	if uses == nil {
		t.Fatal("go.work has no use ( … ) block")
	}
	for _, dir := range strings.Fields(uses[1]) {
		name := filepath.ToSlash(filepath.Join(dir, "go.mod"))
		if got := find(name, `^go (\S+)$`); got != version {
			t.Errorf("%s says go %s, go.work go %s", name, got, version)
		}
	}
	minor := version[:strings.LastIndex(version, ".")]
	if got := find("Dockerfile", `^FROM golang:(\S+) AS build$`); got != minor {
		t.Errorf("the Dockerfile builds FROM golang:%s, want golang:%s (go.work's go %s)", got, minor, version)
	}

	scripts, err := filepath.Glob(filepath.Join(root, "hack", "*.sh"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no hack/*.sh: %v", err)
	}
	scripts = append(scripts, filepath.Join(root, ".ci", "run"))
	sources := regexp.MustCompile(`(?m)^\. "?(\$root/)?hack/lib/go\.sh"?$`)
	for _, s := range scripts {
		name, _ := filepath.Rel(root, s)
		if !sources.MatchString(read(name)) {
			t.Errorf("%s does not source hack/lib/go.sh (GOTOOLCHAIN=%s)", name, toolchain)
		}
	}
}
