// Package ec2test runs moto_server for a test binary and gives tests an EC2
// client of their own for setup (instances) and assertions, independent of
// the code under test.
package ec2test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
)

// Region is the region every test uses.
const Region = "us-east-1"

// Moto is a running moto_server.
type Moto struct {
	URL string
	cmd *exec.Cmd
}

var (
	shared    *Moto
	sharedErr error
	clusterN  atomic.Int64
)

// Main starts moto_server on a free loopback port, sets the AWS environment
// the SDK's default chain reads (region, static credentials, no IMDS), runs
// the tests and stops moto. Use it from TestMain, or call Start and Stop.
func Main(m *testing.M) {
	code := func() int {
		shared, sharedErr = Start()
		if sharedErr != nil {
			fmt.Fprintln(os.Stderr, "ec2test:", sharedErr)
			return 1
		}
		defer shared.Stop()
		return m.Run()
	}()
	os.Exit(code)
}

// StartShared starts the moto that Get returns, for a TestMain that must
// run another fixture's Run (testenv.Run) too; stop it with StopShared.
func StartShared() error {
	shared, sharedErr = Start()
	if sharedErr != nil {
		return fmt.Errorf("ec2test: %w", sharedErr)
	}
	return nil
}

// MainWithKubernetes is TestMain for packages that need both moto and the
// testenv control plane: it starts both, runs the tests, stops both and exits.
func MainWithKubernetes(m *testing.M) {
	if err := StartShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testenv.Run(m)
	StopShared()
	os.Exit(code)
}

// StopShared stops the moto started by StartShared.
func StopShared() {
	if shared != nil {
		shared.Stop()
	}
}

// Get returns the moto started by Main or StartShared.
func Get(t testing.TB) *Moto {
	t.Helper()
	if shared == nil {
		t.Fatalf("ec2test: no moto_server (call ec2test.Main from TestMain): %v", sharedErr)
	}
	return shared
}

// SetEnv sets what the SDK's default chain needs to talk to moto, except the
// endpoint, which each test chooses (moto, or a fault proxy in front of it).
func SetEnv() {
	os.Setenv("AWS_REGION", Region)
	os.Setenv("AWS_ACCESS_KEY_ID", "testing")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "testing")
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	os.Unsetenv("AWS_PROFILE")
	os.Setenv("AWS_CONFIG_FILE", os.DevNull)
	os.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
}

// Start runs moto_server on loopback and waits until it answers.
func Start() (*Moto, error) { return StartAt("127.0.0.1") }

// StartAt runs moto_server on a free port of host (an address of this
// machine: pods on lab/cluster's node reach it at the node address) and
// waits until it answers.
func StartAt(host string) (*Moto, error) {
	SetEnv()
	ports, err := controlplane.FreePortsOn(host, 1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	// moto logs every request; keep it only when asked (EIPD_MOTO_LOG=path).
	logPath := os.Getenv("EIPD_MOTO_LOG")
	cmd := exec.Command("moto_server", "-H", host, "-p", fmt.Sprint(port))
	if logPath != "" {
		out, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		defer out.Close()
		cmd.Stdout, cmd.Stderr = out, out
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start moto_server: %w", err)
	}
	m := &Moto{URL: "http://" + net.JoinHostPort(host, fmt.Sprint(port)), cmd: cmd}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(m.URL + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			return m, nil
		}
		if time.Now().After(deadline) {
			m.Stop()
			return nil, fmt.Errorf("moto_server not ready after 60s (set EIPD_MOTO_LOG=/path to keep its log): %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends moto_server (its whole process group: the pyenv shim execs python).
func (m *Moto) Stop() {
	if m.cmd.Process != nil {
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = m.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

// ClusterID returns a cluster ID unique to this test binary run, so tests
// sharing one moto never see each other's addresses.
func ClusterID(t testing.TB) string {
	return fmt.Sprintf("c%d-%d", os.Getpid(), clusterN.Add(1))
}

// Client returns a plain EC2 client on moto (retries on, no faults) for setup
// and assertions.
func (m *Moto) Client() *ec2.Client {
	return ec2.New(ec2.Options{
		Region:       Region,
		BaseEndpoint: aws.String(m.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("testing", "testing", ""),
	})
}

// Instance is an EC2 instance in moto with its primary interface.
type Instance struct {
	ID, NetworkInterfaceID, PrivateIP, Zone string
}

// ProviderID is the Node spec.providerID naming the instance.
func (i Instance) ProviderID() string { return "aws:///" + i.Zone + "/" + i.ID }

// RunInstance launches one instance in moto.
func (m *Moto) RunInstance(t testing.TB) Instance {
	t.Helper()
	return m.RunInstances(t, 1)[0]
}

// RunInstances launches count instances in moto with one call.
func (m *Moto) RunInstances(t testing.TB, count int) []Instance {
	t.Helper()
	c := m.Client()
	ctx := context.Background()
	imgs, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	if err != nil || len(imgs.Images) == 0 {
		t.Fatalf("describe images: %v", err)
	}
	out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: imgs.Images[0].ImageId, MinCount: aws.Int32(int32(count)), MaxCount: aws.Int32(int32(count)), InstanceType: types.InstanceTypeT3Micro,
	})
	if err != nil {
		t.Fatalf("run instances: %v", err)
	}
	var insts []Instance
	for _, inst := range out.Instances {
		i := Instance{ID: aws.ToString(inst.InstanceId), Zone: aws.ToString(inst.Placement.AvailabilityZone)}
		for _, ni := range inst.NetworkInterfaces {
			if ni.Attachment != nil && aws.ToInt32(ni.Attachment.DeviceIndex) == 0 {
				i.NetworkInterfaceID, i.PrivateIP = aws.ToString(ni.NetworkInterfaceId), aws.ToString(ni.PrivateIpAddress)
			}
		}
		if i.NetworkInterfaceID == "" {
			t.Fatalf("instance %s has no primary interface", i.ID)
		}
		insts = append(insts, i)
	}
	return insts
}

// ClusterTag is the EC2 tag key that makes an instance (and an address) one
// of a cluster's: eipd associates Elastic IPs only with instances tagged
// ClusterTag=<its --cluster-id>.
const ClusterTag = "ipledger.io/cluster"

// TagForCluster tags instances ClusterTag=cluster, as a node group's launch
// template or Karpenter would tag the instances of a cluster.
func (m *Moto) TagForCluster(t testing.TB, cluster string, insts ...Instance) {
	t.Helper()
	ids := make([]string, 0, len(insts))
	for _, i := range insts {
		ids = append(ids, i.ID)
	}
	_, err := m.Client().CreateTags(context.Background(), &ec2.CreateTagsInput{
		Resources: ids, Tags: []types.Tag{{Key: aws.String(ClusterTag), Value: aws.String(cluster)}},
	})
	if err != nil {
		t.Fatalf("tag instances %v for cluster %s: %v", ids, cluster, err)
	}
}

// RunClusterInstances launches count instances tagged for cluster.
func (m *Moto) RunClusterInstances(t testing.TB, cluster string, count int) []Instance {
	t.Helper()
	insts := m.RunInstances(t, count)
	m.TagForCluster(t, cluster, insts...)
	return insts
}

// RunClusterInstance launches one instance tagged for cluster.
func (m *Moto) RunClusterInstance(t testing.TB, cluster string) Instance {
	t.Helper()
	return m.RunClusterInstances(t, cluster, 1)[0]
}

// NodeAddresses are the status.addresses a kubelet on the instance reports:
// its private IP as InternalIP. eipd associates an address only with an
// instance whose private IP is among its Node's InternalIPs.
func (i Instance) NodeAddresses() []corev1.NodeAddress {
	return []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: i.PrivateIP}}
}

// Addresses returns the addresses tagged for cluster, straight from moto.
func (m *Moto) Addresses(t testing.TB, cluster string) []types.Address {
	t.Helper()
	out, err := m.Client().DescribeAddresses(context.Background(), &ec2.DescribeAddressesInput{
		Filters: []types.Filter{{Name: aws.String("tag:ipledger.io/cluster"), Values: []string{cluster}}},
	})
	if err != nil {
		t.Fatalf("describe addresses: %v", err)
	}
	return out.Addresses
}

// Tag returns the value of key among tags.
func Tag(tags []types.Tag, key string) string {
	for _, tg := range tags {
		if aws.ToString(tg.Key) == key {
			return aws.ToString(tg.Value)
		}
	}
	return ""
}

// AllocateOrphan allocates a managed, untagged-for-any-node address for cluster in moto.
func (m *Moto) AllocateOrphan(t testing.TB, cluster string, extra ...types.Tag) types.Address {
	t.Helper()
	tags := append([]types.Tag{
		{Key: aws.String("ipledger.io/managed"), Value: aws.String("true")},
		{Key: aws.String("ipledger.io/cluster"), Value: aws.String(cluster)},
	}, extra...)
	out, err := m.Client().AllocateAddress(context.Background(), &ec2.AllocateAddressInput{
		Domain:            types.DomainTypeVpc,
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeElasticIp, Tags: tags}},
	})
	if err != nil {
		t.Fatalf("allocate: %v", err)
	}
	return types.Address{AllocationId: out.AllocationId, PublicIp: out.PublicIp, Tags: tags}
}
