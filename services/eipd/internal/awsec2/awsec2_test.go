package awsec2_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/faultproxy"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/eipd/internal/awsec2"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

func TestMain(m *testing.M) { ec2test.Main(m) }

type fixture struct {
	moto    *ec2test.Moto
	proxy   *faultproxy.Proxy
	client  *awsec2.Client
	reg     *prometheus.Registry
	cluster string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	moto := ec2test.Get(t)
	proxy, err := faultproxy.Start(moto.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	f := &fixture{moto: moto, proxy: proxy, reg: prometheus.NewRegistry(), cluster: ec2test.ClusterID(t)}
	cfg := awsec2.Config{MaxAttempts: 6, MaxBackoff: 200 * time.Millisecond, CallTimeout: 20 * time.Second}
	f.client, err = awsec2.New(context.Background(), f.cluster, cfg, f.reg, func(o *ec2.Options) {
		o.BaseEndpoint = aws.String(proxy.URL())
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestEndpointFromStandardChain(t *testing.T) {
	moto := ec2test.Get(t)
	t.Setenv("AWS_ENDPOINT_URL_EC2", moto.URL)
	cluster := ec2test.ClusterID(t)
	c, err := awsec2.New(ctx(t), cluster, awsec2.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	moto.AllocateOrphan(t, cluster)
	addrs, err := c.ListManaged(ctx(t))
	if err != nil {
		t.Fatalf("ListManaged through AWS_ENDPOINT_URL_EC2: %v", err)
	}
	if len(addrs) != 1 {
		t.Fatalf("ListManaged = %d addresses, want the 1 orphan of cluster %s", len(addrs), cluster)
	}
}

func TestAllocateTagsAndAssociatesPrimaryInterface(t *testing.T) {
	f := setup(t)
	inst := f.moto.RunInstance(t)

	a, err := f.client.Allocate(ctx(t), "node-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	target, err := f.client.PrimaryTarget(ctx(t), inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if target.NetworkInterfaceID != inst.NetworkInterfaceID || target.PrivateIP != inst.PrivateIP {
		t.Fatalf("PrimaryTarget = %+v, want eni %s ip %s", target, inst.NetworkInterfaceID, inst.PrivateIP)
	}
	if _, err := f.client.Associate(ctx(t), a.AllocationID, target); err != nil {
		t.Fatal(err)
	}
	got := f.moto.Addresses(t, f.cluster)
	if len(got) != 1 {
		t.Fatalf("moto has %d addresses for the cluster, want 1", len(got))
	}
	m := got[0]
	if ec2test.Tag(m.Tags, decide.TagNode) != "node-a" || ec2test.Tag(m.Tags, decide.TagManaged) != "true" || ec2test.Tag(m.Tags, decide.TagCluster) != f.cluster {
		t.Errorf("tags = %v, want managed/cluster/node", m.Tags)
	}
	if aws.ToString(m.NetworkInterfaceId) != inst.NetworkInterfaceID || aws.ToString(m.PrivateIpAddress) != inst.PrivateIP {
		t.Errorf("moto association = %s/%s, want %s/%s", aws.ToString(m.NetworkInterfaceId), aws.ToString(m.PrivateIpAddress), inst.NetworkInterfaceID, inst.PrivateIP)
	}
	listed, err := f.client.ListManaged(ctx(t))
	if err != nil || len(listed) != 1 || !listed[0].AssociatedWith(target) || listed[0].Node != "node-a" || listed[0].AllocatedAt.IsZero() {
		t.Fatalf("ListManaged = %+v, %v; want one address associated with the target", listed, err)
	}
	// A second Allocate for the same node finds the first by tag.
	again, err := f.client.Allocate(ctx(t), "node-a", nil)
	if err != nil || again.AllocationID != a.AllocationID {
		t.Fatalf("second Allocate = %+v, %v; want the existing %s", again, err, a.AllocationID)
	}
	if n := f.proxy.Count("AllocateAddress"); n != 1 {
		t.Errorf("AllocateAddress sent %d times, want 1", n)
	}
	if err := f.client.Disassociate(ctx(t), listed[0].AssociationID); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Release(ctx(t), a.AllocationID); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Release(ctx(t), a.AllocationID); err != nil {
		t.Fatalf("releasing twice must succeed: %v", err)
	}
	if got := f.moto.Addresses(t, f.cluster); len(got) != 0 {
		t.Fatalf("after release moto has %d addresses", len(got))
	}
}

func TestAllocateDroppedResponseFindsAddressByTag(t *testing.T) {
	f := setup(t)
	f.proxy.Inject("AllocateAddress", faultproxy.DropResponse, 1)
	a, err := f.client.Allocate(ctx(t), "node-b", nil)
	if err != nil {
		t.Fatalf("Allocate after a dropped response: %v (want the address found by tag)", err)
	}
	got := f.moto.Addresses(t, f.cluster)
	if len(got) != 1 || aws.ToString(got[0].AllocationId) != a.AllocationID {
		t.Fatalf("moto has %d addresses, want exactly the one returned (%s)", len(got), a.AllocationID)
	}
	if n := f.proxy.Count("AllocateAddress"); n != 1 {
		t.Errorf("AllocateAddress sent %d times, want 1 (never retried)", n)
	}
	if n := testenv.MetricValue(t, f.reg, "ipledger_eipd_uncertain_allocations_total", nil); n != 0 {
		t.Errorf("an address found by tag after a lost response is no uncertain allocation; counted %v", n)
	}
}

func TestAllocateDroppedAndInvisibleIsUncertain(t *testing.T) {
	f := setup(t)
	f.proxy.SetVisibilityDelay(time.Hour)
	f.proxy.Inject("AllocateAddress", faultproxy.DropResponse, 1)
	_, err := f.client.Allocate(ctx(t), "node-c", nil)
	if !errors.Is(err, awsec2.ErrUncertain) {
		t.Fatalf("Allocate = %v, want ErrUncertain", err)
	}
	if n := f.proxy.Count("AllocateAddress"); n != 1 {
		t.Errorf("AllocateAddress sent %d times, want 1", n)
	}
	if got := f.moto.Addresses(t, f.cluster); len(got) != 1 {
		t.Fatalf("moto has %d addresses, want the 1 the lost response allocated", len(got))
	}
	if listed, _ := f.client.ListManaged(ctx(t)); len(listed) != 0 {
		t.Fatalf("the proxy should hide the young address, ListManaged = %+v", listed)
	}
	if n := testenv.MetricValue(t, f.reg, "ipledger_eipd_uncertain_allocations_total", nil); n != 1 {
		t.Errorf("ipledger_eipd_uncertain_allocations_total = %v, want 1", n)
	}
	f.proxy.SetVisibilityDelay(0)
	if listed, _ := f.client.ListManaged(ctx(t)); len(listed) != 1 {
		t.Fatalf("after the delay ListManaged = %+v, want 1", listed)
	}
}

func TestAllocateThrottledIsNotRetriedNorUncertain(t *testing.T) {
	f := setup(t)
	f.proxy.Inject("AllocateAddress", faultproxy.Throttle, 1)
	_, err := f.client.Allocate(ctx(t), "node-d", nil)
	if err == nil || errors.Is(err, awsec2.ErrUncertain) || awsec2.ErrorCode(err) != "RequestLimitExceeded" {
		t.Fatalf("Allocate = %v, want a plain RequestLimitExceeded error", err)
	}
	if n := f.proxy.Count("AllocateAddress"); n != 1 {
		t.Errorf("AllocateAddress sent %d times, want 1", n)
	}
	if got := f.moto.Addresses(t, f.cluster); len(got) != 0 {
		t.Fatalf("moto has %d addresses, want none", len(got))
	}
}

func TestAllocateServerErrorLooksUpBeforeGivingUp(t *testing.T) {
	f := setup(t)
	f.proxy.Inject("AllocateAddress", faultproxy.ServerError, 1)
	_, err := f.client.Allocate(ctx(t), "node-e", nil)
	if !errors.Is(err, awsec2.ErrUncertain) {
		t.Fatalf("Allocate after a 500 = %v, want ErrUncertain (a 5xx may have allocated)", err)
	}
	// Lookup before, lookup after: two describes around one allocate.
	if a, d := f.proxy.Count("AllocateAddress"), f.proxy.Count("DescribeAddresses"); a != 1 || d != 2 {
		t.Errorf("AllocateAddress %d, DescribeAddresses %d; want 1 and 2", a, d)
	}
}

func TestThrottlingIsRetriedWithBackoffAndCounted(t *testing.T) {
	f := setup(t)
	f.proxy.Inject("DescribeAddresses", faultproxy.Throttle, 3)
	f.proxy.Inject("DescribeAddresses", faultproxy.ServerError, 1)
	start := time.Now()
	if _, err := f.client.ListManaged(ctx(t)); err != nil {
		t.Fatalf("ListManaged through 4 faults: %v", err)
	}
	t.Logf("4 faults absorbed in %s", time.Since(start))
	if n := f.proxy.Count("DescribeAddresses"); n != 5 {
		t.Errorf("DescribeAddresses sent %d times, want 5", n)
	}
	errs := testenv.MetricValue(t, f.reg, "ipledger_eipd_ec2_errors_total", map[string]string{"action": "DescribeAddresses", "code": "RequestLimitExceeded"})
	if errs != 3 {
		t.Errorf("throttle errors counted = %v, want 3", errs)
	}
}

func TestThrottlingStormFailsThenRecovers(t *testing.T) {
	f := setup(t)
	f.proxy.Inject("", faultproxy.Throttle, faultproxy.Forever)
	_, err := f.client.ListManaged(ctx(t))
	if awsec2.ErrorCode(err) != "RequestLimitExceeded" && !strings.Contains(err.Error(), "retry") {
		t.Fatalf("ListManaged in a storm = %v, want a throttling error after the attempts", err)
	}
	if n := f.proxy.Count("DescribeAddresses"); n < 2 || n > 6 {
		t.Errorf("DescribeAddresses sent %d times in a storm, want 2..6 (bounded attempts)", n)
	}
	f.proxy.Clear()
	if _, err := f.client.ListManaged(ctx(t)); err != nil {
		t.Fatalf("after the storm: %v", err)
	}
}

func TestPrimaryTargetUnknownInstance(t *testing.T) {
	f := setup(t)
	if _, err := f.client.PrimaryTarget(ctx(t), "i-0000000000000000f"); err == nil {
		t.Fatal("PrimaryTarget of a missing instance succeeded")
	}
}

// TestInstancesAndInterfaceOwnersInOneCallEach: instances are described in
// one call whatever their number, one EC2 does not list is absent (not an
// error: a Node may name anything), and an association that names only its
// interface is traced to its instance.
func TestInstancesAndInterfaceOwnersInOneCallEach(t *testing.T) {
	f := setup(t)
	insts := f.moto.RunInstances(t, 2)
	f.moto.TagForCluster(t, f.cluster, insts[0])
	got, err := f.client.Instances(ctx(t), []string{insts[0].ID, insts[1].ID, "i-0000000000000000f", insts[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.proxy.Count("DescribeInstances"); n != 1 {
		t.Errorf("%d DescribeInstances for 3 instances, want 1", n)
	}
	if len(got) != 2 {
		t.Fatalf("got %d instances, want the 2 that exist: %+v", len(got), got)
	}
	a, b := got[insts[0].ID], got[insts[1].ID]
	if a.Tags[decide.TagCluster] != f.cluster || b.Tags[decide.TagCluster] != "" {
		t.Errorf("cluster tags = %q, %q; want %q and none", a.Tags[decide.TagCluster], b.Tags[decide.TagCluster], f.cluster)
	}
	if a.VPCID == "" || a.Primary != (decide.Target{InstanceID: insts[0].ID, NetworkInterfaceID: insts[0].NetworkInterfaceID, PrivateIP: insts[0].PrivateIP}) {
		t.Errorf("instance = %+v, want its VPC and primary interface %s/%s", a, insts[0].NetworkInterfaceID, insts[0].PrivateIP)
	}

	addr, err := f.client.Allocate(ctx(t), "node-o", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Associate(ctx(t), addr.AllocationID, decide.Target{InstanceID: insts[1].ID, NetworkInterfaceID: insts[1].NetworkInterfaceID, PrivateIP: insts[1].PrivateIP}); err != nil {
		t.Fatal(err)
	}
	listed, err := f.client.LookupByNode(ctx(t), "node-o")
	if err != nil || len(listed) != 1 {
		t.Fatalf("LookupByNode = %+v, %v", listed, err)
	}
	owners, err := f.client.InterfaceOwners(ctx(t), listed)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := owners[insts[1].NetworkInterfaceID]; !ok || o.ID != insts[1].ID {
		t.Errorf("owner of %s = %+v, %v; want instance %s", insts[1].NetworkInterfaceID, o, ok, insts[1].ID)
	}
}
