package objdiff

import (
	"slices"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	const deploy = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, labels: {app.kubernetes.io/name: web}}
spec:
  replicas: 1
  template:
    spec:
      containers:
      - name: web
        args: [--a, --b]
`
	for _, tc := range []struct {
		name string
		a, b string
		want []string
	}{
		{name: "same objects, other formatting and order", a: deploy + "---\nkind: Namespace\nmetadata: {name: shop}\n",
			b: "kind: Namespace\nmetadata:\n  name: shop\n---\n" + `{"apiVersion": "apps/v1", "kind": "Deployment",
"metadata": {"namespace": "shop", "name": "web", "labels": {"app.kubernetes.io/name": "web"}},
"spec": {"template": {"spec": {"containers": [{"args": ["--a", "--b"], "name": "web"}]}}, "replicas": 1}}`},
		{name: "a field differs", a: deploy, b: replace(deploy, "replicas: 1", "replicas: 2"),
			want: []string{"Deployment shop/web: spec.replicas: chart 1, kustomize 2"}},
		{name: "an argument differs and one is extra", a: deploy, b: replace(deploy, "[--a, --b]", "[--a, --c, --d]"),
			want: []string{
				`Deployment shop/web: spec.template.spec.containers[0].args[1]: chart "--b", kustomize "--c"`,
				`Deployment shop/web: spec.template.spec.containers[0].args[2]: only kustomize has it: "--d"`,
			}},
		{name: "a label with dots", a: deploy, b: replace(deploy, "{app.kubernetes.io/name: web}", "{app.kubernetes.io/name: shop}"),
			want: []string{`Deployment shop/web: metadata.labels["app.kubernetes.io/name"]: chart "web", kustomize "shop"`}},
		{name: "null is absent", a: replace(deploy, "replicas: 1", "replicas: 1\n  strategy: null"), b: deploy},
		{name: "an empty map is not absent", a: replace(deploy, "replicas: 1", "replicas: 1\n  strategy: {}"), b: deploy,
			want: []string{"Deployment shop/web: spec.strategy: chart {}, kustomize (absent)"}},
		{name: "objects only one side renders", a: deploy, b: "kind: Namespace\nmetadata: {name: shop}\n",
			want: []string{"Deployment shop/web: only chart renders it", "Namespace shop: only kustomize renders it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Diff("chart", []byte(tc.a), "kustomize", []byte(tc.b), 0)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Diff:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestParseRefusesAnObjectTwice(t *testing.T) {
	if _, err := Parse([]byte("kind: Namespace\nmetadata: {name: a}\n---\nkind: Namespace\nmetadata: {name: a}\n")); err == nil {
		t.Fatal("two Namespaces a parsed without an error")
	}
}

func TestDiffLimitsEachObject(t *testing.T) {
	got, err := Diff("a", []byte("kind: X\nmetadata: {name: x}\nl: [1, 2, 3]\n"), "b", []byte("kind: X\nmetadata: {name: x}\nl: [4, 5, 6]\n"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2] != "X x: (1 more)" {
		t.Errorf("Diff with limit 2: %q", got)
	}
}

func replace(s, old, new string) string { return strings.Replace(s, old, new, 1) }
