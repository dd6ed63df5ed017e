package convert

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func mustText(t *testing.T, s string) *watcherv1.Object {
	t.Helper()
	var o watcherv1.Object
	if err := prototext.Unmarshal([]byte(s), &o); err != nil {
		t.Fatal(err)
	}
	return &o
}

func TestObject(t *testing.T) {
	lbClass := "ipledger.io/lb"
	vip := corev1.LoadBalancerIPModeVIP
	policy := corev1.IPFamilyPolicyPreferDualStack
	tests := []struct {
		name string
		in   runtime.Object
		want string
	}{
		{
			name: "service keeps consumer fields and only ipledger/metallb annotations",
			in: &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1", ResourceVersion: "7", Labels: map[string]string{"app": "web"},
					Annotations: map[string]string{"ipledger.io/loadBalancerIPs": "10.0.0.1", "metallb.universe.tf/address-pool": "p",
						"kubectl.kubernetes.io/last-applied-configuration": "{...}"}},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIPs: []string{"10.96.0.10"}, LoadBalancerClass: &lbClass,
					IPFamilyPolicy: &policy, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, Selector: map[string]string{"app": "web"},
					Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("web")}}},
				Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "10.0.0.1", IPMode: &vip}}}},
			},
			want: `kind: KIND_SERVICE
				meta: {namespace: "ns" name: "web" uid: "u1" resource_version: "7" labels {key: "app" value: "web"}
				  annotations {key: "ipledger.io/loadBalancerIPs" value: "10.0.0.1"} annotations {key: "metallb.universe.tf/address-pool" value: "p"}}
				service: {type: "LoadBalancer" cluster_ips: "10.96.0.10" load_balancer_class: "ipledger.io/lb" ip_family_policy: "PreferDualStack"
				  ip_families: "IPv4" selector {key: "app" value: "web"} has_selector: true
				  ports {name: "http" protocol: "TCP" port: 80 target_port_name: "web"} ingress {ip: "10.0.0.1" ip_mode: "VIP"}}`,
		},
		{
			name: "service keeps Cilium LB-IPAM's request and sharing annotations, not Cilium's others",
			in: &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", Annotations: map[string]string{
					"lbipam.cilium.io/ips": "10.0.0.2", "lbipam.cilium.io/sharing-key": "k", "io.cilium/lb-ipam-sharing-cross-namespace": "*",
					"io.cilium/global-service": "true", "service.cilium.io/global": "true"}},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
			},
			want: `kind: KIND_SERVICE meta: {namespace: "ns" name: "c"
				  annotations {key: "io.cilium/lb-ipam-sharing-cross-namespace" value: "*"} annotations {key: "lbipam.cilium.io/ips" value: "10.0.0.2"}
				  annotations {key: "lbipam.cilium.io/sharing-key" value: "k"}}
				service: {type: "LoadBalancer"}`,
		},
		{
			name: "service without selector",
			in:   &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}},
			want: `kind: KIND_SERVICE meta: {namespace: "ns" name: "ext"} service: {type: "ExternalName"}`,
		},
		{
			name: "ippool from unstructured, autoAssign defaulted",
			in: &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool", "metadata": map[string]any{"name": "p1", "generation": int64(2)},
				"spec": map[string]any{"addresses": []any{"10.0.0.0/24", "10.1.0.1-10.1.0.9"},
					"allocation": map[string]any{"priority": int64(5), "namespaces": []any{"a"},
						"serviceSelectors": []any{map[string]any{"matchLabels": map[string]any{"x": "y"},
							"matchExpressions": []any{map[string]any{"key": "k", "operator": "In", "values": []any{"v"}}}}}}},
				"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "OK", "message": "",
					"lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": int64(2)}}},
			}},
			want: `kind: KIND_IP_POOL meta: {name: "p1" generation: 2}
				ip_pool: {addresses: ["10.0.0.0/24", "10.1.0.1-10.1.0.9"] auto_assign: true
				  allocation: {priority: 5 namespaces: "a" service_selectors {match_labels {key: "x" value: "y"} match_expressions {key: "k" operator: "In" values: "v"}}}
				  conditions {type: "Ready" status: "True" reason: "OK" observed_generation: 2 last_transition_time: 1767225600000000000}}`,
		},
		{
			name: "ippool exclusions",
			in: &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool", "metadata": map[string]any{"name": "p2"},
				"spec": map[string]any{"addresses": []any{"10.0.0.0/24"}, "autoAssign": true, "avoidBuggyIPs": true,
					"exclude": []any{"10.0.0.1", "10.0.0.240-10.0.0.250"}, "skipFirstLastIPs": true},
			}},
			want: `kind: KIND_IP_POOL meta: {name: "p2"}
				ip_pool: {addresses: "10.0.0.0/24" auto_assign: true avoid_buggy_ips: true exclude: ["10.0.0.1", "10.0.0.240-10.0.0.250"] skip_first_last_ips: true}`,
		},
		{
			name: "externalworkload from unstructured, protocol defaulted",
			in: &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload", "metadata": map[string]any{"namespace": "ns", "name": "vm1"},
				"spec": map[string]any{"workloadIPs": []any{map[string]any{"ip": "192.0.2.1"}}, "ports": []any{map[string]any{"name": "http", "port": int64(80)}}},
			}},
			want: `kind: KIND_EXTERNAL_WORKLOAD meta: {namespace: "ns" name: "vm1"}
				external_workload: {workload_ips: "192.0.2.1" ports {name: "http" port: 80 protocol: "TCP"}}`,
		},
		{
			name: "externalworkload with an HTTP readiness probe, defaults filled in",
			in: &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload", "metadata": map[string]any{"namespace": "ns", "name": "vm1"},
				"spec": map[string]any{"workloadIPs": []any{map[string]any{"ip": "192.0.2.1"}},
					"readinessProbe": map[string]any{"httpGet": map[string]any{"port": int64(8080)}, "periodSeconds": int64(5)}},
			}},
			want: `kind: KIND_EXTERNAL_WORKLOAD meta: {namespace: "ns" name: "vm1"}
				external_workload: {workload_ips: "192.0.2.1" readiness_probe {http_get {path: "/" port: 8080 scheme: "HTTP"}
				  period_seconds: 5 timeout_seconds: 1 success_threshold: 1 failure_threshold: 3}}`,
		},
		{
			name: "externalworkload with a TCP readiness probe",
			in: &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload", "metadata": map[string]any{"namespace": "ns", "name": "vm1"},
				"spec": map[string]any{"workloadIPs": []any{map[string]any{"ip": "192.0.2.1"}},
					"readinessProbe": map[string]any{"tcpSocket": map[string]any{"port": int64(22)}, "initialDelaySeconds": int64(30),
						"periodSeconds": int64(10), "timeoutSeconds": int64(2), "successThreshold": int64(2), "failureThreshold": int64(4)}},
			}},
			want: `kind: KIND_EXTERNAL_WORKLOAD meta: {namespace: "ns" name: "vm1"}
				external_workload: {workload_ips: "192.0.2.1" readiness_probe {tcp_socket {port: 22} initial_delay_seconds: 30
				  period_seconds: 10 timeout_seconds: 2 success_threshold: 2 failure_threshold: 4}}`,
		},
		{
			name: "gateway: address type defaulted to IPAddress, only ipledger annotations carried",
			in: &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
				"metadata": map[string]any{"namespace": "shop", "name": "gw", "labels": map[string]any{"team": "a"},
					"annotations": map[string]any{"ipledger.io/address-pool": "p", "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
				"spec": map[string]any{"gatewayClassName": "istio", "addresses": []any{
					map[string]any{"value": "192.0.2.10"},
					map[string]any{"type": "IPAddress", "value": "2001:db8::10"},
					map[string]any{"type": "NamedAddress", "value": "public"},
					map[string]any{"type": "Hostname", "value": "gw.example.com"}}},
			}},
			want: `kind: KIND_GATEWAY meta: {namespace: "shop" name: "gw" labels {key: "team" value: "a"} annotations {key: "ipledger.io/address-pool" value: "p"}}
				gateway: {gateway_class_name: "istio" addresses {type: "IPAddress" value: "192.0.2.10"} addresses {type: "IPAddress" value: "2001:db8::10"}
				  addresses {type: "NamedAddress" value: "public"} addresses {type: "Hostname" value: "gw.example.com"}}`,
		},
		{
			name: "gatewayclass",
			in: &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
				"metadata": map[string]any{"name": "istio", "annotations": map[string]any{"ipledger.io/address-pool": "public"}},
				"spec":     map[string]any{"controllerName": "istio.io/gateway-controller"},
			}},
			want: `kind: KIND_GATEWAY_CLASS meta: {name: "istio" annotations {key: "ipledger.io/address-pool" value: "public"}}
				gateway_class: {controller_name: "istio.io/gateway-controller"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Object(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if want := mustText(t, tt.want); !proto.Equal(got, want) {
				t.Errorf("got  %v\nwant %v", prototext.Format(got), prototext.Format(want))
			}
		})
	}
}

func TestIPPoolWrongTypeIsAnError(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": "p"}, "spec": map[string]any{"addresses": "10.0.0.0/24"}}}
	if _, err := IPPool(u); err == nil {
		t.Fatal("want an error for spec.addresses as a string")
	}
}

// Istio's own Gateway kind (networking.istio.io) shares the name and is not
// the Gateway API's: it must not be read as one.
func TestGatewayOfAnotherGroupIsRefused(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "networking.istio.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"namespace": "ns", "name": "gw"}, "spec": map[string]any{"servers": []any{}}}}
	_, err := Object(u)
	if err == nil || !strings.Contains(err.Error(), `"Gateway" of "networking.istio.io/v1"`) {
		t.Fatalf("got %v, want an error naming the kind and apiVersion", err)
	}
}
