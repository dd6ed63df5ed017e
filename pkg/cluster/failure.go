package cluster

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// Failures of a node, for the tests of what survives one (an address that
// keeps carrying traffic when the node announcing it dies): a node's
// kubelet and one of its containers killed at once, as a machine losing its
// power kills them — nothing updates its status or says goodbye on its way
// out — and the kubelet started again to bring the node back. The node's
// link to a test LAN is the LAN's (LAN.SetNodeLink). Down takes down a node
// in any of these states as any other: it stops what runs, by pid file, and
// removes the rest.

// KillKubelet kills node name's kubelet with SIGKILL and waits until it is
// gone. The node's containers run on, unwatched; its Node object turns
// NotReady once the controller manager's grace period has passed.
func (c *Cluster) KillKubelet(name string) error {
	n, err := c.nodeNamed(name)
	if err != nil {
		return err
	}
	d, ok := running(n.l, "kubelet")
	if !ok {
		return fmt.Errorf("node %s: the kubelet is not running (pid file %s)", name, n.l.pidFile("kubelet"))
	}
	_ = syscall.Kill(d.pid, syscall.SIGKILL)
	if !waitGone(d.alive, 10*time.Second) {
		return fmt.Errorf("node %s: the kubelet (pid %d) still runs 10s after SIGKILL", name, d.pid)
	}
	return nil
}

// StartKubelet starts node name's kubelet again, as Up did, after
// KillKubelet; the node is not waited for (its Node turns Ready again within
// a status update, and the kubelet restarts the containers that died).
func (c *Cluster) StartKubelet(name string) error {
	n, err := c.nodeNamed(name)
	if err != nil {
		return err
	}
	if d, ok := running(n.l, "kubelet"); ok {
		return fmt.Errorf("node %s: the kubelet runs already (pid %d)", name, d.pid)
	}
	return c.startKubelet(n)
}

// KillContainer kills the container containerID (as a pod's status names
// it, containerd://<id>, or the bare id) on node name with SIGKILL, through
// the node's containerd, and waits until its task has stopped.
func (c *Cluster) KillContainer(ctx context.Context, name, containerID string) error {
	n, err := c.nodeNamed(name)
	if err != nil {
		return err
	}
	id := strings.TrimPrefix(containerID, "containerd://")
	if _, err := ctr(ctx, n, "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", id); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := ctr(ctx, n, "-n", "k8s.io", "tasks", "ls")
		if err != nil {
			return err
		}
		if !taskRunning(string(out), id) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: container %s still runs 10s after SIGKILL", name, id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// taskRunning says whether `ctr tasks ls` (TASK PID STATUS) lists task id
// as RUNNING.
func taskRunning(ls, id string) bool {
	for _, line := range strings.Split(ls, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == id {
			return f[2] == "RUNNING"
		}
	}
	return false
}

// nodeNamed is the cluster's node of that name.
func (c *Cluster) nodeNamed(name string) (node, error) {
	for _, n := range c.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return node{}, fmt.Errorf("no node %s in the cluster", name)
}
