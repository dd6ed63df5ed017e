package reference

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// RunbookBase is where every alert's runbook_url points: a heading of
// docs/troubleshooting.md, by its GitHub anchor.
const RunbookBase = "https://github.com/ipledger/ipledger/blob/main/docs/troubleshooting.md#"

// TestEveryAlertHasARunbook: every alert of components/monitoring carries a
// runbook_url into docs/troubleshooting.md, at a heading that exists.
func TestEveryAlertHasARunbook(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "deploy", "kustomize", "components", "monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := Anchors(string(doc))
	alerts := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, RunbookBase)
			switch {
			case url == "":
				t.Errorf("alert %s has no runbook_url annotation; add one pointing at a heading of docs/troubleshooting.md", r.Alert)
			case !ok:
				t.Errorf("alert %s: runbook_url %q is not under %s", r.Alert, url, RunbookBase)
			case !anchors[anchor]:
				t.Errorf("alert %s: runbook_url names #%s, which no heading of docs/troubleshooting.md makes", r.Alert, anchor)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("prometheusrule.yaml holds no alert")
	}
}

// Anchors are the GitHub anchors of a markdown document's headings: lower
// case, punctuation dropped, spaces as hyphens (a repeated heading's
// numbered suffix is not made: ipledger's headings are unique).
func Anchors(doc string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		out[anchor(strings.TrimLeft(line, "#"))] = true
	}
	return out
}

var notInAnchor = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)

func anchor(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = notInAnchor.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

func TestAnchors(t *testing.T) {
	got := Anchors("# \"My Service has no IP\"\n## 6. eipd: a Node without its Elastic IP (or still tainted)\n```sh\n# not a heading\n```\n### IpledgerIPAMNoLeader\n")
	for _, want := range []string{"my-service-has-no-ip", "6-eipd-a-node-without-its-elastic-ip-or-still-tainted", "ipledgeripamnoleader"} {
		if !got[want] {
			t.Errorf("Anchors lacks %q: %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code block counted as a heading")
	}
}

// TestTroubleshootingLinksResolve: the page's links to its own headings
// (the runbooks point at each other) lead somewhere.
func TestTroubleshootingLinksResolve(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := Anchors(string(doc))
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(string(doc), -1) {
		if !anchors[m[1]] {
			t.Errorf("docs/troubleshooting.md links to #%s, which no heading makes", m[1])
		}
	}
}
