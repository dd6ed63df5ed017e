package reference

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// daemons are the four services, each with the subcommands that have flags
// of their own.
var daemons = []struct {
	name, pkg   string
	subcommands []string
}{
	{"ipledger-watcher", "./services/watcher/cmd/ipledger-watcher", nil},
	{"ipledger-ipam", "./services/ipam/cmd/ipledger-ipam", []string{"preflight"}},
	{"ipledger-endpoints", "./services/endpoints/cmd/ipledger-endpoints", nil},
	{"ipledger-eipd", "./services/eipd/cmd/ipledger-eipd", nil},
}

const plugin = "./plugin/cmd/kubectl-ipledger"

// build builds the binaries into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, d := range daemons {
		args = append(args, d.pkg)
	}
	cmd := exec.Command("go", append(args, plugin)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// help runs a binary with --help in an environment that makes its defaults
// the same on every machine (no $KUBECONFIG, a fixed $HOME), and returns
// what it printed on stdout and stderr.
func help(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--help")...)
	cmd.Env = []string{"HOME=/home/you", "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s --help: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestFlagReference: docs/reference/flags.md holds every flag of every
// binary, as its --help prints it.
func TestFlagReference(t *testing.T) {
	bin := build(t)
	var b strings.Builder
	b.WriteString(header("flags", "each binary's --help") + "# Flags\n\n" +
		"Every flag of ipledger's binaries, from their `--help`. Each also takes `--version`. The shipped manifests set\n" +
		"them in `deploy/kustomize` ([install.md](../install.md)).\n")
	for _, d := range daemons {
		flags, err := ParseGoFlags(help(t, filepath.Join(bin, d.name)))
		if err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		b.WriteString("\n## " + d.name + "\n\n" + FlagTable(flags))
		for _, sub := range d.subcommands {
			out := help(t, filepath.Join(bin, d.name), sub)
			_, list, _ := strings.Cut(out, "\nFlags:\n")
			flags, err := ParseGoFlags(list)
			if err != nil {
				t.Fatalf("%s %s: %v", d.name, sub, err)
			}
			b.WriteString("\n### " + d.name + " " + sub + "\n\n" + FlagTable(flags))
		}
	}
	b.WriteString("\n## kubectl ipledger\n\n" +
		"The plugin's commands ([kubectl-ipledger.md](../kubectl-ipledger.md)), each with its own flags; every command also\n" +
		"takes the global flags, kubectl's, listed first.\n")
	pluginBin := filepath.Join(bin, "kubectl-ipledger")
	root := help(t, pluginBin)
	b.WriteString("\n### Global flags\n\n```\n" + CobraSection(root, "Flags:") + "\n```\n")
	var walk func(path []string, out string)
	walk = func(path []string, out string) {
		for _, sc := range CobraSubcommands(out) {
			p := append(append([]string{}, path...), sc.Name)
			sub := help(t, pluginBin, p...)
			b.WriteString("\n### kubectl ipledger " + strings.Join(p, " ") + "\n\n" + sc.Short + ".\n")
			if local := CobraSection(sub, "Flags:"); local != "" {
				b.WriteString("\n```\n" + local + "\n```\n")
			}
			walk(p, sub)
		}
	}
	walk(nil, root)
	checkPage(t, "flags.md", b.String())
}

func TestParseGoFlags(t *testing.T) {
	help := "Usage of x:\n  -addr string\n    \tlisten address (default \":8443\")\n  -plain\n    \tno TLS\n  -d duration\n    \ta wait,\n    \ton two lines (default 10s)\n"
	got, err := ParseGoFlags(help)
	if err != nil {
		t.Fatal(err)
	}
	want := []Flag{
		{Name: "addr", Type: "string", Default: `":8443"`, Usage: "listen address"},
		{Name: "plain", Type: "bool", Usage: "no TLS"},
		{Name: "d", Type: "duration", Default: "10s", Usage: "a wait, on two lines"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("flag %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
