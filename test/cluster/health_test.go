package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEveryPodHealthy loads the install (Services in a pool of their own)
// and then checks what the kubelet and the logs say about every ipledger
// pod: Ready, no container restarted, no liveness probe failed, no RBAC
// denial logged, and each container's peak memory (its cgroup's high-water
// mark) below its limit.
func TestEveryPodHealthy(t *testing.T) {
	e := get(t)
	ctx := context.Background()
	l := e.startLoad(t, 10*time.Millisecond, 300)
	l.waitCreated(t, 300)
	e.ips(t, l.ns, l.stop(t), 3*time.Minute)

	list, err := e.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=ipledger"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) < len(deployments) {
		t.Fatalf("%d ipledger pods, want at least one per Deployment", len(list.Items))
	}
	for _, p := range list.Items {
		t.Run(p.Name, func(t *testing.T) {
			if !podReady(p) {
				t.Errorf("not Ready: %+v", p.Status.Conditions)
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.RestartCount != 0 {
					t.Errorf("container %s restarted %d times (last: %+v)", cs.Name, cs.RestartCount, cs.LastTerminationState.Terminated)
				}
			}
			e.noRBACDenials(t, p)
			for _, c := range p.Spec.Containers {
				limit := c.Resources.Limits.Memory()
				if limit.IsZero() {
					t.Errorf("container %s has no memory limit", c.Name)
					continue
				}
				peak, err := peakMemory(p, c.Name)
				if err != nil {
					t.Error(err)
					continue
				}
				t.Logf("container %s: peak memory %d MiB of %d MiB", c.Name, peak>>20, limit.Value()>>20)
				if peak >= limit.Value() {
					t.Errorf("container %s peaked at %d bytes, its limit is %d", c.Name, peak, limit.Value())
				}
			}
		})
	}

	events, err := e.client.CoreV1().Events(systemNS).List(ctx, metav1.ListOptions{FieldSelector: "reason=Unhealthy"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.HasPrefix(e.Message, "Liveness probe failed") {
			t.Errorf("%s: %s (%d times)", e.InvolvedObject.Name, e.Message, e.Count)
		} else {
			t.Logf("%s: %s (%d times)", e.InvolvedObject.Name, e.Message, e.Count)
		}
	}
}

// peakMemory is the high-water mark of a container's memory cgroup (cgroup
// v1, the kubelet's cgroupfs driver: kubepods/<qos>/pod<uid>/<container id>),
// what the kernel compares with the limit.
func peakMemory(p corev1.Pod, container string) (int64, error) {
	var id string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			_, id, _ = strings.Cut(cs.ContainerID, "://")
		}
	}
	if id == "" {
		return 0, fmt.Errorf("container %s of %s has no container ID", container, p.Name)
	}
	qos := map[corev1.PodQOSClass]string{corev1.PodQOSGuaranteed: "", corev1.PodQOSBurstable: "burstable", corev1.PodQOSBestEffort: "besteffort"}[p.Status.QOSClass]
	path := filepath.Join("/sys/fs/cgroup/memory/kubepods", qos, "pod"+string(p.UID), id, "memory.max_usage_in_bytes")
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("peak memory of %s/%s: %w", p.Name, container, err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
}
