package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/testenv"
)

// TestImagesAreQualifiedAndPinned: every container of every kustomization
// runs a fully qualified image (a registry host, so no runtime resolves it
// against a registry namespace ipledger does not own) at a tag that is not
// latest, and the installs for users run the release the repository's
// VERSION file names — eipd's too, which only components/eip adds
// (testdata/eip).
func TestImagesAreQualifiedAndPinned(t *testing.T) {
	env := testenv.Get(t)
	v, err := os.ReadFile(filepath.Join(env.Root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	release := "v" + strings.TrimSpace(string(v))
	rendered := map[string][]byte{eipInstall: renderDir(t, eipInstall)}
	for _, k := range kustomizations {
		rendered[k] = render(t, k)
	}
	for k, out := range rendered {
		for _, d := range deployments(t, out) {
			for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
				repo, tag, tagged := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":")
				host, _, _ := strings.Cut(c.Image, "/")
				switch {
				case !tagged || tag == "" || strings.Contains(c.Image, "@"):
					t.Errorf("%s: Deployment %s, container %s: image %q has no tag", k, d.Name, c.Name, c.Image)
					continue
				case !strings.Contains(c.Image, "/") || !strings.ContainsAny(host, ".:"):
					t.Errorf("%s: Deployment %s: image %q names no registry host", k, d.Name, c.Image)
				case tag == "latest":
					t.Errorf("%s: Deployment %s: image %q is :latest", k, d.Name, c.Image)
				case !strings.HasPrefix(c.Image, containerimage.Registry+"/"+repo+":"):
					t.Errorf("%s: Deployment %s: image %q is not one of ipledger's (%s/...)", k, d.Name, c.Image, containerimage.Registry)
				}
				if k != e2eOverlay && tag != release {
					t.Errorf("%s: Deployment %s: image %q, want the release %s (VERSION)", k, d.Name, c.Image, release)
				}
			}
		}
	}
}
