package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/ipledger/ipledger/lab/controlplane"
)

// A node beyond the first can fail and come back (FailNode, RestoreNode),
// as a machine that loses power or its network does, for the tests of what
// the cluster does then: its kubelet and kube-proxy die and its link to the
// rest goes down, so neither the node nor its pods reach the API server or
// any other node. Its pods' processes keep running, cut off — a partition,
// the harder case for a leader-elected controller than a power loss, since
// the cut-off leader still believes it leads until its renew deadline. The
// first node cannot fail: the control plane and the pods' bridge live there.
//
// A test that needs one of the cut-off pods dead too, as a power loss kills
// it, kills its container (KillContainer); RestoreNode's kubelet finds it
// dead and restarts it. A node's link to a test LAN is the LAN's
// (LAN.SetNodeLink): FailNode leaves it up.
//
// Nothing here is host state Down does not already remove: Down deletes the
// link (up or down) with the node's routes, and stops daemons whether or not
// they run.

// FailNode fails node name, a node beyond the first: its host link
// (HostLink) goes down first — the moment the node drops off the network —
// then its kubelet and kube-proxy are killed (SIGKILL, no graceful stop:
// the kubelet neither updates its Node nor stops its pods). The node's Node
// object stays Ready until the node lifecycle controller stops hearing from
// it (node-monitor-grace-period).
func (c *Cluster) FailNode(name string) error {
	n, err := c.extraNode(name)
	if err != nil {
		return err
	}
	if err := ip("link", "set", n.HostLink, "down"); err != nil {
		return fmt.Errorf("fail node %s: %w", n.Name, err)
	}
	var errs []error
	for _, d := range []string{"kubelet", "kube-proxy"} {
		errs = append(errs, kill(n.l, d))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fail node %s: %w", n.Name, err)
	}
	return nil
}

// RestoreNode brings back node name after FailNode: its link up again with
// the host's route to its pods (the kernel drops the routes through a link
// that goes down), its kubelet and kube-proxy started as Up started them;
// it returns once the Node is Ready. The kubelet finds the pods' containers
// still running and takes them over.
func (c *Cluster) RestoreNode(ctx context.Context, name string) error {
	n, err := c.extraNode(name)
	if err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "set", n.HostLink, "up"},
		{"route", "replace", n.PodCIDR, "via", n.IP, "dev", n.HostLink},
	} {
		if err := ip(args...); err != nil {
			return fmt.Errorf("restore node %s: %w", n.Name, err)
		}
	}
	for _, d := range []string{"kubelet", "kube-proxy"} {
		if _, ok := running(n.l, d); ok {
			return fmt.Errorf("restore node %s: its %s runs already (was it failed with FailNode?)", n.Name, d)
		}
	}
	if err := c.startNode(n); err != nil {
		return fmt.Errorf("restore node %s: %w", n.Name, err)
	}
	return c.waitNodeReady(ctx, n, 2*time.Minute)
}

// extraNode is the node of c named name, refusing the first.
func (c *Cluster) extraNode(name string) (node, error) {
	for _, n := range c.nodes {
		if n.Name != name {
			continue
		}
		if n.index == 1 {
			return node{}, fmt.Errorf("node %s is the first node, with the control plane: only the nodes beyond it (%s-2 …) can fail", name, NodeName)
		}
		return n, nil
	}
	return node{}, fmt.Errorf("no node %s in the cluster (Options.Nodes, IPLEDGER_NODES)", name)
}

// kill SIGKILLs the node's daemon of name, if it runs, waits for it to be
// gone and removes its pid file.
func kill(l layout, name string) error {
	if d, ok := running(l, name); ok {
		_ = syscall.Kill(d.pid, syscall.SIGKILL)
		if !waitGone(d.alive, 10*time.Second) {
			return fmt.Errorf("%s (pid %d) still runs 10s after SIGKILL", name, d.pid)
		}
	}
	return stopDaemon(l, name, 0)
}

// KillContainer kills the container containerID (as a pod's status names
// it, containerd://<id>, or the bare id) on node name, a node beyond the
// first, with SIGKILL through the node's containerd, and waits until its
// task has stopped.
func (c *Cluster) KillContainer(ctx context.Context, name, containerID string) error {
	n, err := c.extraNode(name)
	if err != nil {
		return err
	}
	id := strings.TrimPrefix(containerID, "containerd://")
	if _, err := ctr(ctx, n, "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", id); err != nil {
		return err
	}
	return controlplane.WaitFor(ctx, 10*time.Second, fmt.Sprintf("node %s: container %s", name, id), func() error {
		out, err := ctr(ctx, n, "-n", "k8s.io", "tasks", "ls")
		if err != nil {
			return err
		}
		if taskRunning(string(out), id) {
			return fmt.Errorf("its task still runs after SIGKILL")
		}
		return nil
	})
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
