// Command pause is the sandbox process of every pod on the test node
// (pkg/cluster): it holds the pod's namespaces open, reaps the zombies of
// containers that share its PID namespace, and exits on SIGINT or SIGTERM.
// It replaces registry.k8s.io/pause, which the node cannot pull.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
