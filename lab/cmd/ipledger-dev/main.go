// Command ipledger-dev runs the whole ipledger system on this machine: etcd,
// kube-apiserver, moto (EC2), and the four services as local processes, each
// authenticated with its own ServiceAccount token under the RBAC of
// deploy/kustomize. State and logs live in .dev/ at the repository root.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

const usage = `ipledger-dev runs ipledger locally (state and logs in .dev/).

Usage:
  ipledger-dev up [--replicas watcher=3,ipam=2]   start everything (idempotent: running parts are kept)
  ipledger-dev down                              stop everything and delete .dev/state
  ipledger-dev status                            show what runs where
  ipledger-dev env                               print export lines (KUBECONFIG, IPLEDGER_*_ADDR, IPLEDGER_TOKEN, AWS_*)
  ipledger-dev logs [-f] [component]             print (or follow) logs
  ipledger-dev stop|start|restart <component> [replica]
                                                 components: watcher, ipam, endpoints, eipd
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	dev, err := newDev()
	if err == nil {
		err = dispatch(dev, os.Args[1], os.Args[2:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ipledger-dev:", err)
		os.Exit(1)
	}
}

func dispatch(dev *Dev, cmd string, args []string) error {
	switch cmd {
	case "up":
		fs := flag.NewFlagSet("up", flag.ExitOnError)
		replicas := fs.String("replicas", "", "replicas per component, e.g. watcher=3,ipam=2 (default 1 each)")
		_ = fs.Parse(args)
		counts, err := parseReplicas(*replicas)
		if err != nil {
			return err
		}
		return dev.Up(counts)
	case "down":
		return dev.Down()
	case "status":
		return dev.Status(os.Stdout)
	case "env":
		return dev.Env(os.Stdout)
	case "logs":
		fs := flag.NewFlagSet("logs", flag.ExitOnError)
		follow := fs.Bool("f", false, "follow")
		_ = fs.Parse(args)
		return dev.Logs(os.Stdout, *follow, fs.Arg(0))
	case "stop", "start", "restart":
		if len(args) < 1 {
			return fmt.Errorf("%s needs a component (watcher, ipam, endpoints, eipd)", cmd)
		}
		replica := -1
		if len(args) > 1 {
			if _, err := fmt.Sscan(args[1], &replica); err != nil {
				return fmt.Errorf("replica %q: want a number", args[1])
			}
		}
		return dev.Control(cmd, args[0], replica)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

func parseReplicas(s string) (map[string]int, error) {
	counts := map[string]int{}
	for _, c := range components {
		counts[c] = 1
	}
	if s == "" {
		return counts, nil
	}
	for _, part := range strings.Split(s, ",") {
		name, n, ok := strings.Cut(part, "=")
		var v int
		if _, err := fmt.Sscan(n, &v); !ok || err != nil || v < 0 {
			return nil, fmt.Errorf("--replicas %q: want component=count, e.g. watcher=3", part)
		}
		if _, known := counts[name]; !known {
			return nil, fmt.Errorf("--replicas: unknown component %q (watcher, ipam, endpoints, eipd)", name)
		}
		counts[name] = v
	}
	return counts, nil
}
