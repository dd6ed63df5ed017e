// Package e2e is a Kubernetes e2e test binary that holds only the specs of
// k8s.io/kubernetes/test/e2e/network (the LoadBalancer and Service specs
// test/cluster's TestUpstreamLoadBalancerSpecs runs against ipledger), at
// the version hack/tools pins. hack/build-e2e.sh compiles it with
// `go test -c`. It does what k8s.io/kubernetes/test/e2e does in e2e_test.go
// and e2e.go (flags, the suite's setup), minus the other SIGs' packages and
// the cloud providers: the skeleton provider is built into the framework.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	utilnet "k8s.io/utils/net"

	// define and freeze constants
	_ "k8s.io/kubernetes/test/e2e/feature"
	// the specs
	_ "k8s.io/kubernetes/test/e2e/network"
	// reconfigure the framework as test/e2e does
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
)

func TestMain(m *testing.M) {
	versionFlag := flag.CommandLine.Bool("version", false, "Displays version information.")
	runID := flag.CommandLine.String("e2e-run-id", "", "The run's ID (the label e2e-run of every namespace it creates) instead of a random one, so that an IPPool can select this run's namespaces.")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if *versionFlag {
		fmt.Printf("%s\n", version.Get())
		os.Exit(0)
	}
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s", flag.CommandLine.Args())
		os.Exit(1)
	}
	if *runID != "" {
		framework.RunID = types.UID(*runID)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Kubernetes e2e suite (network)", suiteConfig, reporterConfig)
}

// The suite's setup of test/e2e/e2e.go that these specs rely on: every node
// schedulable, the node count (specs needing more nodes skip themselves) and
// the cluster's IP family.
var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "Error loading client")
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, framework.NewTimeoutContext().NodeSchedulable))
	return nil
}, func(ctx context.Context, _ []byte) {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "Error loading client")
	if framework.TestContext.CloudConfig.NumNodes == framework.DefaultNumNodes {
		nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
		framework.ExpectNoError(err)
		framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
	}
	svc, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	framework.ExpectNoError(err)
	framework.TestContext.IPFamily = "ipv4"
	if utilnet.IsIPv6String(svc.Spec.ClusterIP) {
		framework.TestContext.IPFamily = "ipv6"
	}
	framework.Logf("e2e test version: %s; cluster IP family: %s", version.Get().GitVersion, framework.TestContext.IPFamily)
})
