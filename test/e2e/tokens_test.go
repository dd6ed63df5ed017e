package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/ipledger/ipledger/pkg/authz"
)

// TestManifestsProjectTokensForIPledger: in every kustomization, the token
// file a component sends to the watcher (--watcher-token-file) is a
// projected ServiceAccount token with the watcher's audience alone, and no
// server is told to accept an audience other than its own and, for one
// release, the legacy one: a token seen on the wire cannot be replayed
// against the Kubernetes API, nor at another ipledger server.
func TestManifestsProjectTokensForIPledger(t *testing.T) {
	own := map[string]string{
		"ipledger-watcher": authz.WatcherAudience,
		"ipledger-ipam":    authz.IPAMAudience,
		"ipledger-eipd":    authz.EIPDAudience,
	}
	for _, k := range kustomizations {
		t.Run(k, func(t *testing.T) {
			out := render(t, k)
			clients := 0
			for _, d := range deployments(t, out) {
				spec := d.Spec.Template.Spec
				for _, c := range spec.Containers {
					for _, arg := range c.Args {
						for _, flag := range []string{"--grpc-token-audiences=", "--grpc-token-audience="} {
							v, ok := strings.CutPrefix(arg, flag)
							if !ok {
								continue
							}
							for _, a := range strings.Split(v, ",") {
								if a != own[d.Name] && a != authz.LegacyAudience {
									t.Errorf("%s/%s accepts audience %q; want only %q (and, for one release, %q)", d.Name, c.Name, a, own[d.Name], authz.LegacyAudience)
								}
							}
						}
						path, ok := strings.CutPrefix(arg, "--watcher-token-file=")
						if !ok {
							continue
						}
						clients++
						if got := projectedAudience(spec, c, path); got != authz.WatcherAudience {
							t.Errorf("%s/%s sends %s, a token for audience %q; want a projected token for %q", d.Name, c.Name, path, got, authz.WatcherAudience)
						}
					}
				}
			}
			// Every Deployment but the watcher's and the signer's (which
			// talks only to the API server): ipam, endpoints (and eipd).
			want := 0
			for _, d := range deployments(t, out) {
				if d.Name != "ipledger-watcher" && d.Name != "ipledger-signer" {
					want++
				}
			}
			if clients != want {
				t.Errorf("found %d --watcher-token-file clients, want %d", clients, want)
			}
		})
	}
}

func deployments(t *testing.T, rendered []byte) []appsv1.Deployment {
	t.Helper()
	return objectsOf[appsv1.Deployment](t, rendered, "Deployment")
}

// objectsOf decodes the objects of kind (every object: "") in rendered, a
// multi-document YAML stream (a rendered kustomization), in their order.
func objectsOf[T any](t *testing.T, rendered []byte, kind string) []T {
	t.Helper()
	var out []T
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		var doc json.RawMessage
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if kind != "" && meta.Kind != kind {
			continue
		}
		var obj T
		if err := json.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		out = append(out, obj)
	}
}

// projectedAudience is the audience of the projected ServiceAccount token at
// path in container c ("" for another kind of file, "<none>" without one).
func projectedAudience(spec corev1.PodSpec, c corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				if sat := src.ServiceAccountToken; sat != nil && sat.Path == rel {
					if sat.Audience == "" {
						return "<none>"
					}
					return sat.Audience
				}
			}
		}
	}
	return ""
}
