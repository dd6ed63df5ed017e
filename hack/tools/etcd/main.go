// Command etcd runs the etcd server from the pinned go.etcd.io/etcd/server module,
// so the local control plane needs no prebuilt binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
