package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/faultproxy"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/eipd/internal/controller"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// BenchmarkColdStart: N labelled Nodes exist, each on its own moto
// instance; eipd starts and the clock runs until every Node carries its
// label. The floor, measured in the same run against the same moto and API
// server, is the least work that result needs, done by a plain client with
// as many workers as eipd: per Node one tag lookup, one AllocateAddress,
// one DescribeInstances, one AssociateAddress and one Node patch.
//
//	go test ./internal/app -run '^$' -bench ColdStart -benchtime 1x
func BenchmarkColdStart(b *testing.B) {
	const n = 40
	env := testenv.Get(b)
	moto := ec2test.Get(b)
	for i := range b.N {
		cluster, lease, prefix := names(b)
		prefix = fmt.Sprintf("%s-%d", prefix, i)
		insts := moto.RunInstances(b, 2*n)
		for j := range n {
			createNode(b, env, cluster, fmt.Sprintf("%s-e%d", prefix, j), insts[j])
		}

		watcher := startWatcher(b, env)
		start := time.Now()
		r := startReplica(b, env, watcher, "bench", replicaOpts{cluster: cluster, lease: lease, minInterval: 10 * time.Second})
		waitLeading(b, env, lease, "bench")
		leading := time.Since(start)
		var nodes []string
		for j := range n {
			nodes = append(nodes, fmt.Sprintf("%s-e%d", prefix, j))
		}
		waitLabelled(b, env, nodes)
		eipd := time.Since(start)
		for j := range n {
			if got := addressesFor(b, cluster, fmt.Sprintf("%s-e%d", prefix, j)); len(got) != 1 {
				b.Fatalf("node e%d has %d addresses", j, len(got))
			}
		}
		calls := r.proxy.Counts()
		r.stop()

		var def controller.Config
		def.Defaults()
		floor := floorRun(b, env, moto, cluster+"-floor", prefix, insts[n:], def.Workers)
		b.ReportMetric(eipd.Seconds(), "eipd-s")
		b.ReportMetric(floor.Seconds(), "floor-s")
		b.ReportMetric(eipd.Seconds()/floor.Seconds(), "ratio")
		b.ReportMetric((eipd-leading).Seconds()/floor.Seconds(), "ratio-after-lease")
		b.Logf("%d nodes: eipd %s (lease held after %s), floor %s; ratio %.2f, %.2f from the lease; eipd's EC2 calls %v",
			n, eipd, leading, floor, eipd.Seconds()/floor.Seconds(), (eipd-leading).Seconds()/floor.Seconds(), calls)
	}
}

func floorRun(b *testing.B, env *testenv.Env, moto *ec2test.Moto, cluster, prefix string, insts []ec2test.Instance, workers int) time.Duration {
	proxy, err := faultproxy.Start(moto.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer proxy.Close()
	c := ec2.New(ec2.Options{Region: ec2test.Region, BaseEndpoint: aws.String(proxy.URL()), Credentials: moto.Client().Options().Credentials})
	var names []string
	for j, inst := range insts {
		name := fmt.Sprintf("%s-f%d", prefix, j)
		names = append(names, name)
		_, err := env.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: inst.ProviderID()},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { deleteNode(b, env, name) })
	}
	ctx := context.Background()
	start := time.Now()
	inParallel(b, workers, len(insts), func(j int) error {
		inst, name := insts[j], names[j]
		if _, err := c.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: []types.Filter{
			{Name: aws.String("tag:" + decide.TagCluster), Values: []string{cluster}},
			{Name: aws.String("tag:" + decide.TagNode), Values: []string{name}},
		}}); err != nil {
			return err
		}
		out, err := c.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: types.DomainTypeVpc, TagSpecifications: []types.TagSpecification{{
			ResourceType: types.ResourceTypeElasticIp,
			Tags:         []types.Tag{{Key: aws.String(decide.TagCluster), Value: aws.String(cluster)}, {Key: aws.String(decide.TagNode), Value: aws.String(name)}},
		}}})
		if err != nil {
			return err
		}
		if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{inst.ID}}); err != nil {
			return err
		}
		if _, err := c.AssociateAddress(ctx, &ec2.AssociateAddressInput{AllocationId: out.AllocationId,
			NetworkInterfaceId: aws.String(inst.NetworkInterfaceID), PrivateIpAddress: aws.String(inst.PrivateIP)}); err != nil {
			return err
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, controller.LabelExternalIP, aws.ToString(out.PublicIp))
		if _, err := env.Client.CoreV1().Nodes().Patch(ctx, name, k8stypes.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
		return nil
	})
	return time.Since(start)
}

// BenchmarkJoin200: eipd leads; 200 labelled Nodes join at once (each on
// its own moto instance) and the clock runs until every Node carries its
// label. The floor is floorRun's plain client over 200 more instances, in
// the same run.
//
//	go test ./internal/app -run '^$' -bench Join200 -benchtime 1x
func BenchmarkJoin200(b *testing.B) {
	const n = 200
	env := testenv.Get(b)
	moto := ec2test.Get(b)
	for i := range b.N {
		cluster, lease, prefix := names(b)
		prefix = fmt.Sprintf("%s-%d", prefix, i)
		insts := moto.RunInstances(b, 2*n)
		moto.TagForCluster(b, cluster, insts[:n]...)
		watcher := startWatcher(b, env)
		// Stopping drains the syncs the Nodes' own updates queued: give it time.
		r := startReplica(b, env, watcher, "bench", replicaOpts{cluster: cluster, lease: lease, stopTimeout: 5 * time.Minute})
		waitLeading(b, env, lease, "bench")
		start := time.Now()
		var nodes []string
		for j := range n {
			name := fmt.Sprintf("%s-j%d", prefix, j)
			nodes = append(nodes, name)
			createTaintedNode(b, env, name, insts[j], true)
		}
		waitLabelled(b, env, nodes)
		eipd := time.Since(start)
		calls := r.proxy.Counts()
		r.stop()
		var def controller.Config
		def.Defaults()
		floor := floorRun(b, env, moto, cluster+"-floor", prefix, insts[n:], def.Workers)
		b.ReportMetric(eipd.Seconds(), "eipd-s")
		b.ReportMetric(floor.Seconds(), "floor-s")
		b.ReportMetric(eipd.Seconds()/floor.Seconds(), "ratio")
		b.Logf("%d nodes joining: all labelled after %s, floor %s; ratio %.2f; eipd's EC2 calls %v", n, eipd, floor, eipd.Seconds()/floor.Seconds(), calls)
	}
}

// BenchmarkReservedSetJoin: eipd leads with a reserved set of N addresses;
// N Nodes join at once, each with the startup taint, and the clock runs
// until the last taint is gone. The floor, in the same run, is a plain
// client with as many workers doing the least the contract allows per
// Node: list the cluster's addresses, tag one for the Node, describe its
// instance, associate, publish it on the Node, list again to see the
// association, then read the Node and remove the taint.
//
//	go test ./internal/app -run '^$' -bench ReservedSetJoin -benchtime 1x
func BenchmarkReservedSetJoin(b *testing.B) {
	const n = 40
	env := testenv.Get(b)
	moto := ec2test.Get(b)
	path := filepath.Join(b.TempDir(), "reserved-sets.yaml")
	if err := os.WriteFile(path, []byte("sets:\n- name: bench\n  addresses: {tags: {allowlist: bench}}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	allowlist := types.Tag{Key: aws.String("allowlist"), Value: aws.String("bench")}
	for i := range b.N {
		cluster, lease, prefix := names(b)
		prefix = fmt.Sprintf("%s-%d", prefix, i)
		insts := moto.RunInstances(b, 2*n)
		moto.TagForCluster(b, cluster, insts[:n]...)
		for range n {
			moto.AllocateOrphan(b, cluster, allowlist)
		}
		watcher := startWatcher(b, env)
		r := startReplica(b, env, watcher, "bench", replicaOpts{cluster: cluster, lease: lease, reservedSets: path})
		waitLeading(b, env, lease, "bench")
		start := time.Now()
		var names []string
		for j := range n {
			name := fmt.Sprintf("%s-r%d", prefix, j)
			names = append(names, name)
			createTaintedNode(b, env, name, insts[j], true)
		}
		waitUntainted(b, env, names)
		eipd := time.Since(start)
		seen := map[string]bool{}
		for _, name := range names {
			got := addressesFor(b, cluster, name)
			if len(got) != 1 || seen[got[0]] {
				b.Fatalf("node %s has addresses %v (seen %v)", name, got, seen)
			}
			seen[got[0]] = true
		}
		calls := r.proxy.Counts()
		r.stop()
		if calls["AllocateAddress"] != 0 {
			b.Fatalf("eipd allocated %d addresses with a reserved set", calls["AllocateAddress"])
		}

		var def controller.Config
		def.Defaults()
		floor := reservedFloorRun(b, env, moto, cluster+"-floor", prefix, insts[n:], def.Workers, allowlist)
		b.ReportMetric(eipd.Seconds(), "eipd-s")
		b.ReportMetric(floor.Seconds(), "floor-s")
		b.ReportMetric(eipd.Seconds()/floor.Seconds(), "ratio")
		b.Logf("%d nodes joining with a reserved set of %d: last taint removed after %s, floor %s; ratio %.2f; eipd's EC2 calls %v",
			n, n, eipd, floor, eipd.Seconds()/floor.Seconds(), calls)
	}
}

func createTaintedNode(b testing.TB, env *testenv.Env, name string, inst ec2test.Instance, optIn bool) {
	labels := map[string]string{}
	if optIn {
		labels[controller.LabelOptIn] = "true"
	}
	_, err := env.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.NodeSpec{ProviderID: inst.ProviderID(), Taints: []corev1.Taint{
			{Key: controller.DefaultStartupTaint, Effect: corev1.TaintEffectNoSchedule},
			{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Addresses: inst.NodeAddresses()},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { deleteNode(b, env, name) })
}

func reservedFloorRun(b *testing.B, env *testenv.Env, moto *ec2test.Moto, cluster, prefix string, insts []ec2test.Instance, workers int, allowlist types.Tag) time.Duration {
	proxy, err := faultproxy.Start(moto.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer proxy.Close()
	c := ec2.New(ec2.Options{Region: ec2test.Region, BaseEndpoint: aws.String(proxy.URL()), Credentials: moto.Client().Options().Credentials})
	var addrs []types.Address
	for range insts {
		addrs = append(addrs, moto.AllocateOrphan(b, cluster, allowlist))
	}
	ctx := context.Background()
	list := func() error {
		_, err := c.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: []types.Filter{
			{Name: aws.String("tag:" + decide.TagCluster), Values: []string{cluster}},
		}})
		return err
	}
	var names []string
	for j := range insts {
		names = append(names, fmt.Sprintf("%s-rf%d", prefix, j))
	}
	start := time.Now()
	for _, name := range names {
		createTaintedNode(b, env, name, insts[slices.Index(names, name)], false)
	}
	inParallel(b, workers, len(insts), func(j int) error {
		inst, name, a := insts[j], names[j], addrs[j]
		steps := []func() error{
			list,
			func() error {
				_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{aws.ToString(a.AllocationId)},
					Tags: []types.Tag{{Key: aws.String(decide.TagNode), Value: aws.String(name)}}})
				return err
			},
			func() error {
				_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{inst.ID}})
				return err
			},
			func() error {
				_, err := c.AssociateAddress(ctx, &ec2.AssociateAddressInput{AllocationId: a.AllocationId,
					NetworkInterfaceId: aws.String(inst.NetworkInterfaceID), PrivateIpAddress: aws.String(inst.PrivateIP)})
				return err
			},
			func() error {
				patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, controller.LabelExternalIP, aws.ToString(a.PublicIp))
				_, err := env.Client.CoreV1().Nodes().Patch(ctx, name, k8stypes.MergePatchType, []byte(patch), metav1.PatchOptions{})
				return err
			},
			list,
			func() error {
				if _, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
					return err
				}
				_, err := env.Client.CoreV1().Nodes().Patch(ctx, name, k8stypes.JSONPatchType,
					[]byte(`[{"op":"remove","path":"/spec/taints/0"}]`), metav1.PatchOptions{})
				return err
			},
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		return nil
	})
	took := time.Since(start)
	waitUntainted(b, env, names)
	return took
}

// inParallel runs do(0..n-1) on workers goroutines, as a floor's plain
// client spreads its work; the first error fails the benchmark.
func inParallel(b *testing.B, workers, n int, do func(j int) error) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range work {
				if err := do(j); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for j := range n {
		work <- j
	}
	close(work)
	wg.Wait()
}

// waitLeading waits until identity holds the Lease.
func waitLeading(b *testing.B, env *testenv.Env, lease, identity string) {
	testenv.Eventually(b, time.Minute, func() error {
		l, err := env.Client.CoordinationV1().Leases(system).Get(context.Background(), lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != identity {
			return fmt.Errorf("lease not held by %s yet: %v", identity, err)
		}
		return nil
	})
}

// waitLabelled waits until every Node of names carries its address label.
func waitLabelled(b testing.TB, env *testenv.Env, names []string) {
	waitNodes(b, env, names, "labelled", func(n corev1.Node) bool { return n.Labels[controller.LabelExternalIP] != "" })
}

// waitUntainted waits until no Node of names carries the startup taint.
func waitUntainted(b testing.TB, env *testenv.Env, names []string) {
	waitNodes(b, env, names, "untainted", func(n corev1.Node) bool {
		return !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == controller.DefaultStartupTaint })
	})
}

// waitNodes waits until every Node of names is done, listing all Nodes at
// once per poll.
func waitNodes(b testing.TB, env *testenv.Env, names []string, what string, done func(corev1.Node) bool) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	testenv.Eventually(b, 10*time.Minute, func() error {
		nodes, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		n := 0
		for _, nd := range nodes.Items {
			if want[nd.Name] && done(nd) {
				n++
			}
		}
		if n < len(names) {
			return fmt.Errorf("%d/%d nodes %s", n, len(names), what)
		}
		return nil
	})
}
