package reference

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/ipledger/ipledger/pkg/convert"
)

// Pages are the reference pages, by their name under docs/reference.
const (
	CRDsPage        = "crds.md"
	AnnotationsPage = "annotations.md"
	FlagsPage       = "flags.md"
)

// CRDFiles are the CRDs of the base install, under
// deploy/kustomize/base/crds.
var CRDFiles = []string{"ipledger.io_ippools.yaml", "ipledger.io_externalworkloads.yaml"}

// CRD is what the pages read of a CustomResourceDefinition.
type CRD struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// ReadCRD reads one of CRDFiles from the repository at root.
func ReadCRD(root, name string) (CRD, error) {
	var c CRD
	data, err := os.ReadFile(filepath.Join(root, "deploy", "kustomize", "base", "crds", name))
	if err != nil {
		return c, err
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

// header is the notice at the top of every generated page.
func header(source string) string {
	return "<!-- Generated from " + source + " by `go test ./test/e2e -run ReferencePages -update`; do not edit. -->\n\n"
}

// CRDs is docs/reference/crds.md: every field of the CRDs of the
// repository at root.
func CRDs(root string) (string, error) {
	var b strings.Builder
	b.WriteString(header("deploy/kustomize/base/crds") + "# Custom resources\n\n" +
		"Every field of ipledger's two CRDs, from their schemas. How to use them: [pools.md](../pools.md) (IPPool),\n" +
		"[externalworkloads.md](../externalworkloads.md) (ExternalWorkload).\n")
	for _, name := range CRDFiles {
		c, err := ReadCRD(root, name)
		if err != nil {
			return "", err
		}
		for _, v := range c.Spec.Versions {
			b.WriteString("\n" + CRDPage(c.Spec.Names.Kind, c.Spec.Group, v.Name, CRDFields(v.Schema.OpenAPIV3Schema)))
		}
	}
	return b.String(), nil
}

// Annotations is docs/reference/annotations.md: convert.CarriedAnnotations,
// the only annotations the watcher streams and so the only ones ipledger's
// controllers read, by kind, ipledger's own before other projects'
// spellings.
func Annotations() string {
	keys := make([]string, 0, len(convert.CarriedAnnotations))
	for k := range convert.CarriedAnnotations {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := convert.CarriedAnnotations[keys[i]], convert.CarriedAnnotations[keys[j]]
		if ka, kb := kind(a.On), kind(b.On); ka != kb {
			return ka < kb
		}
		if oi, oj := strings.HasPrefix(keys[i], "ipledger.io/"), strings.HasPrefix(keys[j], "ipledger.io/"); oi != oj {
			return oi
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	b.WriteString(header("pkg/convert's CarriedAnnotations") + "# Annotations\n\n" +
		"Every annotation ipledger reads. The watcher drops every other annotation before it streams an object, so\n" +
		"nothing else can change what ipam, endpoints or eipd do. MetalLB's, Cilium LB-IPAM's and kube-vip's\n" +
		"spellings are read for migration ([migrating-from-metallb.md](../migrating-from-metallb.md)).\n\n" +
		"| annotation | on | read by | meaning |\n|---|---|---|---|\n")
	for _, k := range keys {
		a := convert.CarriedAnnotations[k]
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k, a.On, a.ReadBy, cell(a.Meaning))
	}
	return b.String()
}

// kind is the first kind an annotation is read on ("Service, GatewayClass":
// Service).
func kind(on string) string {
	k, _, _ := strings.Cut(on, ",")
	return k
}

// Daemon is one of ipledger's binaries, with the subcommands that
// have flags of their own.
type Daemon struct {
	Name        string
	Subcommands []string
}

// Daemons are the four services and the signer of components/tls-signer.
var Daemons = []Daemon{
	{Name: "ipledger-watcher"},
	{Name: "ipledger-ipam", Subcommands: []string{"preflight"}},
	{Name: "ipledger-endpoints"},
	{Name: "ipledger-eipd"},
	{Name: "ipledger-signer"},
}

// Help runs a binary with --help in an environment that makes its defaults
// the same on every machine (no $KUBECONFIG, a fixed $HOME), and returns
// what it printed on stdout and stderr.
func Help(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, append(args, "--help")...)
	cmd.Env = []string{"HOME=/home/you", "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s --help: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Flags is docs/reference/flags.md: every flag of the daemons (binary
// names the path of each of Daemons) and of every command of the plugin at
// plugin, from their --help.
func Flags(binary func(name string) string, plugin string) (string, error) {
	var b strings.Builder
	b.WriteString(header("each binary's --help") + "# Flags\n\n" +
		"Every flag of ipledger's binaries, from their `--help`. Each also takes `--version`. The shipped manifests set\n" +
		"them in `deploy/kustomize` ([install.md](../install.md)).\n")
	for _, d := range Daemons {
		out, err := Help(binary(d.Name))
		if err != nil {
			return "", err
		}
		flags, err := ParseGoFlags(out)
		if err != nil {
			return "", fmt.Errorf("%s: %w", d.Name, err)
		}
		b.WriteString("\n## " + d.Name + "\n\n" + FlagTable(flags))
		for _, sub := range d.Subcommands {
			out, err := Help(binary(d.Name), sub)
			if err != nil {
				return "", err
			}
			_, list, _ := strings.Cut(out, "\nFlags:\n")
			flags, err := ParseGoFlags(list)
			if err != nil {
				return "", fmt.Errorf("%s %s: %w", d.Name, sub, err)
			}
			b.WriteString("\n### " + d.Name + " " + sub + "\n\n" + FlagTable(flags))
		}
	}
	b.WriteString("\n## kubectl ipledger\n\n" +
		"The plugin's commands ([kubectl-ipledger.md](../kubectl-ipledger.md)), each with its own flags; every command also\n" +
		"takes the global flags, kubectl's, listed first.\n")
	root, err := Help(plugin)
	if err != nil {
		return "", err
	}
	b.WriteString("\n### Global flags\n\n```\n" + CobraSection(root, "Flags:") + "\n```\n")
	var walk func(path []string, out string) error
	walk = func(path []string, out string) error {
		for _, sc := range CobraSubcommands(out) {
			p := append(append([]string{}, path...), sc.Name)
			sub, err := Help(plugin, p...)
			if err != nil {
				return err
			}
			b.WriteString("\n### kubectl ipledger " + strings.Join(p, " ") + "\n\n" + sc.Short + ".\n")
			if local := CobraSection(sub, "Flags:"); local != "" {
				b.WriteString("\n```\n" + local + "\n```\n")
			}
			if err := walk(p, sub); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(nil, root); err != nil {
		return "", err
	}
	return b.String(), nil
}
