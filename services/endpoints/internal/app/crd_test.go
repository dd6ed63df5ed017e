package app_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipledger/ipledger/lab/testenv"
)

// TestReadinessProbeValidation: the CRD accepts a TCP or an HTTP probe, fills
// in the Pod-like defaults, and refuses a probe with no action, two actions,
// out-of-bounds numbers or a timeout longer than the period, naming the field.
func TestReadinessProbeValidation(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	res := env.Dynamic.Resource(workloadGVR).Namespace(ns)
	workload := func(name string, probe map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"workloadIPs": []any{map[string]any{"ip": "192.0.2.1"}}, "readinessProbe": probe},
		}}
	}
	tcp := map[string]any{"port": int64(22)}
	cases := []struct {
		name    string
		probe   map[string]any
		invalid string // "" for valid; else a substring the error must contain
	}{
		{"tcp", map[string]any{"tcpSocket": tcp}, ""},
		{"http", map[string]any{"httpGet": map[string]any{"port": int64(8080), "path": "/healthz?full=1", "scheme": "HTTPS"}}, ""},
		{"no action", map[string]any{"periodSeconds": int64(5)}, "exactly one of tcpSocket and httpGet"},
		{"two actions", map[string]any{"tcpSocket": tcp, "httpGet": map[string]any{"port": int64(80)}}, "exactly one of tcpSocket and httpGet"},
		{"port 0", map[string]any{"tcpSocket": map[string]any{"port": int64(0)}}, "spec.readinessProbe.tcpSocket.port"},
		{"relative path", map[string]any{"httpGet": map[string]any{"port": int64(80), "path": "healthz"}}, "spec.readinessProbe.httpGet.path"},
		{"unknown scheme", map[string]any{"httpGet": map[string]any{"port": int64(80), "scheme": "FTP"}}, "spec.readinessProbe.httpGet.scheme"},
		{"period 0", map[string]any{"tcpSocket": tcp, "periodSeconds": int64(0)}, "spec.readinessProbe.periodSeconds"},
		{"period too long", map[string]any{"tcpSocket": tcp, "periodSeconds": int64(301)}, "spec.readinessProbe.periodSeconds"},
		{"timeout over period", map[string]any{"tcpSocket": tcp, "periodSeconds": int64(2), "timeoutSeconds": int64(3)}, "timeoutSeconds must not exceed periodSeconds"},
		{"failure threshold 0", map[string]any{"tcpSocket": tcp, "failureThreshold": int64(0)}, "spec.readinessProbe.failureThreshold"},
		{"negative initial delay", map[string]any{"tcpSocket": tcp, "initialDelaySeconds": int64(-1)}, "spec.readinessProbe.initialDelaySeconds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			created, err := res.Create(context.Background(), workload(strings.ReplaceAll(tc.name, " ", "-"), tc.probe), metav1.CreateOptions{})
			if tc.invalid != "" {
				if err == nil {
					t.Fatalf("probe %v accepted", tc.probe)
				}
				if !strings.Contains(err.Error(), tc.invalid) {
					t.Fatalf("error should contain %q: %v", tc.invalid, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("valid probe %v refused: %v", tc.probe, err)
			}
			// Later replicas of this test binary would probe it.
			t.Cleanup(func() { _ = res.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{}) })
			got, _, _ := unstructured.NestedMap(created.Object, "spec", "readinessProbe")
			for field, want := range map[string]int64{"initialDelaySeconds": 0, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3} {
				if v, ok := got[field].(int64); !ok || v != want {
					t.Errorf("%s = %v, want the default %d", field, got[field], want)
				}
			}
			if h, ok := got["httpGet"].(map[string]any); ok && h["path"] != "/healthz?full=1" {
				t.Errorf("httpGet.path = %v", h["path"])
			}
		})
	}
	// The defaults of httpGet.
	created, err := res.Create(context.Background(), workload("http-defaults", map[string]any{"httpGet": map[string]any{"port": int64(80)}}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{}) })
	h, _, _ := unstructured.NestedMap(created.Object, "spec", "readinessProbe", "httpGet")
	if h["path"] != "/" || h["scheme"] != "HTTP" {
		t.Fatalf("httpGet defaults: %v, want path / and scheme HTTP", h)
	}
}

// TestWorkloadIPsAnEndpointSliceRefusesAreRefused: an address no
// EndpointSlice may hold (loopback, link-local, unspecified) is refused when
// the workload is written, naming the field.
func TestWorkloadIPsAnEndpointSliceRefusesAreRefused(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	res := env.Dynamic.Resource(workloadGVR).Namespace(ns)
	for i, ip := range []string{"192.0.2.1", "2001:db8::1", "127.0.0.1", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "224.0.0.251"} {
		t.Run(ip, func(t *testing.T) {
			_, err := res.Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload",
				"metadata": map[string]any{"name": "vm-" + strconv.Itoa(i)},
				"spec":     map[string]any{"workloadIPs": []any{map[string]any{"ip": ip}}},
			}}, metav1.CreateOptions{})
			usable := i < 2
			switch {
			case usable && err != nil:
				t.Fatalf("%s refused: %v", ip, err)
			case !usable && err == nil:
				t.Fatalf("%s accepted", ip)
			case !usable && (!strings.Contains(err.Error(), "spec.workloadIPs[0].ip") || !strings.Contains(err.Error(), "an EndpointSlice")):
				t.Fatalf("error should name the field and why: %v", err)
			}
		})
	}
}
