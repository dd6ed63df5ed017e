package connect

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name string, phase corev1.PodPhase, ready bool) corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status:     corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func TestChoosePod(t *testing.T) {
	terminating := pod("a-terminating", corev1.PodRunning, true)
	terminating.DeletionTimestamp = &metav1.Time{}
	pods := []corev1.Pod{pod("c", corev1.PodRunning, true), pod("b", corev1.PodRunning, false), terminating, pod("d", corev1.PodPending, false)}
	for _, tc := range []struct {
		name   string
		pods   []corev1.Pod
		target Target
		holder string
		want   string // a Pod name, or the error's text
	}{
		{"reads go to the first Ready Pod by name", pods, AnyReplica, "", "c"},
		{"reads skip terminating and unready Pods", pods[1:], AnyReplica, "", "no ipam Pod is Ready in ns (a-terminating, b, d)"},
		{"writes go to the holder", pods, Leader, "c", "c"},
		{"a holder that is not Ready", pods, Leader, "b", "the ipam leader b (holder of Lease ns/lease) is not Ready"},
		{"a holder that is no Pod here", pods, Leader, "gone", `the ipam leader "gone" (holder of Lease ns/lease) is not one of ipam's Pods in ns`},
		{"no holder", pods, Leader, "", "the Lease ns/lease has no holder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChoosePod(tc.pods, tc.target, tc.holder, "ns", "lease")
			if err != nil {
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q, want %q", err, tc.want)
				}
				return
			}
			if got.Name != tc.want {
				t.Errorf("chose %s, want %s", got.Name, tc.want)
			}
		})
	}
}

func TestServiceAccountOf(t *testing.T) {
	for _, tc := range []struct {
		flag, ns, name, err string
	}{
		{"", "", "", ""},
		{"me", "ipledger-system", "me", ""},
		{"ops/me", "ops", "me", ""},
		{"/me", "", "", "want NAME or NAMESPACE/NAME"},
		{"ops/", "", "", "want NAME or NAMESPACE/NAME"},
		{"a/b/c", "", "", "want NAME or NAMESPACE/NAME"},
	} {
		ns, name, err := ServiceAccountOf(tc.flag, "ipledger-system")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.flag, err, tc.err)
			}
			continue
		}
		if err != nil || ns != tc.ns || name != tc.name {
			t.Errorf("%q: %q %q %v, want %q %q", tc.flag, ns, name, err, tc.ns, tc.name)
		}
	}
}

func TestPodSpecReading(t *testing.T) {
	base := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Args:  []string{"--ops-addr=:8080", "--grpc-addr=:9443", "--grpc-plaintext"},
		Ports: []corev1.ContainerPort{{Name: "ops", ContainerPort: 8080}, {Name: "grpc", ContainerPort: 9444}},
	}}}}
	if servesTLS(&base) != plaintext {
		t.Error("the base install (--grpc-plaintext) read as TLS")
	}
	if got := grpcPort(&base); got != 9444 {
		t.Errorf("grpcPort = %d, want the port named grpc, 9444", got)
	}
	tlsPod := base.DeepCopy()
	tlsPod.Spec.Containers[0].Args[2] = "--grpc-tls-cert-file=/etc/ipledger/tls/tls.crt"
	tlsPod.Spec.Containers[0].Ports = nil
	if servesTLS(tlsPod) != tlsFromFiles {
		t.Error("components/tls (--grpc-tls-cert-file) not read as TLS from files")
	}
	signerPod := base.DeepCopy()
	signerPod.Spec.Containers[0].Args[2] = "--grpc-tls-signer=ipledger.io/grpc-serving"
	if servesTLS(signerPod) != tlsFromSigner {
		t.Error("components/tls-signer (--grpc-tls-signer) not read as TLS from the signer")
	}
	if got := grpcPort(tlsPod); got != defaultPort {
		t.Errorf("grpcPort without a named port = %d, want %d", got, defaultPort)
	}
}
