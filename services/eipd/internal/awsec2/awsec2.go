// Package awsec2 is eipd's only door to EC2: it lists, allocates, tags,
// associates and releases the Elastic IPs eipd manages, over aws-sdk-go-v2
// configured from the SDK's standard chain (AWS_ENDPOINT_URL_EC2, AWS_REGION,
// credentials, profiles), with adaptive retries that back off on throttling.
//
// AllocateAddress has no idempotency token, so it is the one call sent with
// retries off: a retried allocation whose first response was lost creates a
// second address. After any failure that may have allocated, the address is
// looked up by its Node tag before anything else happens.
package awsec2

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/promreg"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// ErrUncertain wraps an AllocateAddress failure after which an address may
// exist that EC2 does not list yet (a lost response, a timeout, a 5xx). The
// caller must not allocate again for that Node until the address shows up or
// EC2 has had time to show it.
var ErrUncertain = errors.New("allocation outcome unknown")

// Config tunes the EC2 client. Endpoint, region and credentials come from
// the SDK's standard chain, not from here.
type Config struct {
	// MaxAttempts per call (except AllocateAddress, which has one).
	MaxAttempts int
	// MaxBackoff caps the delay between retries.
	MaxBackoff time.Duration
	// CallTimeout bounds each call including its retries.
	CallTimeout time.Duration
	// PublicIPv4Pool, when set, is the public IPv4 address pool (BYOIP,
	// ipv4pool-ec2-…) AllocateAddress takes new addresses from.
	PublicIPv4Pool string
}

// Defaults fills the fields left unset.
func (c *Config) Defaults() {
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 8
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 20 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 2 * time.Minute
	}
}

// Flags registers the EC2 client flags with the current values as their
// defaults (call Defaults first).
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxAttempts, "ec2-max-attempts", c.MaxAttempts, "attempts per EC2 call with adaptive retry (AllocateAddress is never retried)")
	fs.DurationVar(&c.MaxBackoff, "ec2-max-backoff", c.MaxBackoff, "longest delay between retries of an EC2 call")
	fs.DurationVar(&c.CallTimeout, "ec2-call-timeout", c.CallTimeout, "deadline of one EC2 call including its retries")
	fs.StringVar(&c.PublicIPv4Pool, "public-ipv4-pool", c.PublicIPv4Pool, "allocate new Elastic IPs from this public IPv4 pool (bring your own IP: ipv4pool-ec2-…) instead of Amazon's")
}

// API is every EC2 action eipd calls, and the only way Client reaches EC2:
// a call not listed here does not compile. The IAM policy shipped in
// deploy/aws/eipd-iam-policy.json is tested against its methods
// (TestIAMPolicyGrantsExactlyWhatEipdCalls): add an action here and the test
// fails until the policy grants it, with its tag condition if it mutates.
type API interface {
	DescribeAddresses(context.Context, *ec2.DescribeAddressesInput, ...func(*ec2.Options)) (*ec2.DescribeAddressesOutput, error)
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeNetworkInterfaces(context.Context, *ec2.DescribeNetworkInterfacesInput, ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error)
	AllocateAddress(context.Context, *ec2.AllocateAddressInput, ...func(*ec2.Options)) (*ec2.AllocateAddressOutput, error)
	CreateTags(context.Context, *ec2.CreateTagsInput, ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
	DeleteTags(context.Context, *ec2.DeleteTagsInput, ...func(*ec2.Options)) (*ec2.DeleteTagsOutput, error)
	AssociateAddress(context.Context, *ec2.AssociateAddressInput, ...func(*ec2.Options)) (*ec2.AssociateAddressOutput, error)
	DisassociateAddress(context.Context, *ec2.DisassociateAddressInput, ...func(*ec2.Options)) (*ec2.DisassociateAddressOutput, error)
	ReleaseAddress(context.Context, *ec2.ReleaseAddressInput, ...func(*ec2.Options)) (*ec2.ReleaseAddressOutput, error)
}

var _ API = (*ec2.Client)(nil)

// Client manages the Elastic IPs of one cluster.
type Client struct {
	ec2       API
	region    string
	clusterID string
	cfg       Config
	metrics   *metrics
}

type metrics struct {
	calls     *prometheus.CounterVec
	errors    *prometheus.CounterVec
	uncertain prometheus.Counter
}

// ValidateClusterID checks a --cluster-id. It goes verbatim into the
// ipledger.io/cluster tag and into DescribeAddresses tag filters, where '*'
// and '?' are wildcards: "prod-*" would match every prod cluster's addresses.
func ValidateClusterID(id string) error {
	switch {
	case id == "":
		return errors.New("--cluster-id is required: it scopes the Elastic IPs eipd manages, and two clusters sharing one AWS " +
			"account must never share it. Choose a name unique in the account (the EKS cluster name, say) and pass " +
			"--cluster-id=<name>; with kustomize, set data.cluster-id of the ConfigMap ipledger-eip that components/eip reads " +
			"(docs/eipd.md, Install)")
	case strings.ContainsAny(id, `*?\`):
		return fmt.Errorf("--cluster-id %q contains '*', '?' or a backslash, which EC2 filters treat as wildcards: it would match other clusters' addresses; use letters, digits, '-', '_' or '.'", id)
	case len(id) > 255:
		return fmt.Errorf("--cluster-id is %d characters; an EC2 tag value holds at most 255", len(id))
	}
	return nil
}

// New loads the SDK's default configuration (plus optFns, for tests) and
// returns a client for clusterID's addresses. The region comes from the SDK's
// chain (AWS_REGION, the shared config) and, failing those, from the
// instance metadata service (IMDS) of the node eipd runs on.
func New(ctx context.Context, clusterID string, cfg Config, reg prometheus.Registerer, optFns ...func(*ec2.Options)) (*Client, error) {
	if err := ValidateClusterID(clusterID); err != nil {
		return nil, err
	}
	if p := cfg.PublicIPv4Pool; p != "" && !strings.HasPrefix(p, "ipv4pool-ec2-") {
		return nil, fmt.Errorf("--public-ipv4-pool %q: want a public IPv4 pool ID, ipv4pool-ec2-… (aws ec2 describe-public-ipv4-pools lists yours)", p)
	}
	cfg.Defaults()
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRetryer(func() aws.Retryer {
		return retry.NewAdaptiveMode(func(o *retry.AdaptiveModeOptions) {
			o.StandardOptions = append(o.StandardOptions, func(so *retry.StandardOptions) {
				so.MaxAttempts = cfg.MaxAttempts
				so.MaxBackoff = cfg.MaxBackoff
			})
		})
	}))
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		region, err := imdsRegion(ctx, awsCfg)
		if err != nil {
			return nil, fmt.Errorf("no AWS region: set AWS_REGION (or a profile's region); the instance metadata service did not give one either: %w", err)
		}
		awsCfg.Region = region
	}
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_eipd_ec2_requests_total",
			Help: "EC2 HTTP requests (each retry attempt counts) by action.",
		}, []string{"action"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_eipd_ec2_errors_total",
			Help: "Failed EC2 HTTP requests (each retry attempt counts) by action and error code.",
		}, []string{"action", "code"}),
		uncertain: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_eipd_uncertain_allocations_total",
			Help: "AllocateAddress calls whose outcome stayed unknown (a 5xx, a timeout or a lost response, and no address tagged for the Node " +
				"listed after it): the Node waits up to --ec2-consistency-timeout for an address to appear before eipd allocates again.",
		}),
	}
	if err := promreg.Register(reg, m.calls, m.errors, m.uncertain); err != nil {
		return nil, err
	}
	optFns = append([]func(*ec2.Options){func(o *ec2.Options) {
		o.APIOptions = append(o.APIOptions, m.addMiddleware)
	}}, optFns...)
	client := ec2.NewFromConfig(awsCfg, optFns...)
	return &Client{ec2: client, region: client.Options().Region, clusterID: clusterID, cfg: cfg, metrics: m}, nil
}

// imdsRegion asks the instance metadata service of the EC2 instance eipd
// runs on for its region (AWS_EC2_METADATA_SERVICE_ENDPOINT and
// AWS_EC2_METADATA_DISABLED apply).
func imdsRegion(ctx context.Context, awsCfg aws.Config) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := imds.NewFromConfig(awsCfg).GetRegion(ctx, &imds.GetRegionInput{})
	if err != nil {
		return "", err
	}
	return out.Region, nil
}

// Region is the AWS region the client talks to.
func (c *Client) Region() string { return c.region }

// addMiddleware counts every attempt: it sits after the retry middleware, so
// a throttled call retried five times counts six requests and five errors.
func (m *metrics) addMiddleware(stack *middleware.Stack) error {
	return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("ipledgerMetrics",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			action := awsmiddleware.GetOperationName(ctx)
			m.calls.WithLabelValues(action).Inc()
			out, md, err := next.HandleFinalize(ctx, in)
			if err != nil {
				m.errors.WithLabelValues(action, ErrorCode(err)).Inc()
			}
			return out, md, err
		}), "Retry", middleware.After)
}

// ErrorCode names an EC2 error for metrics and logs: the API error code, or
// a transport-level class.
func ErrorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "Canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "Timeout"
	case errors.Is(err, ErrUncertain):
		return "Uncertain"
	}
	return "Transport"
}

// IsNotFound reports whether err says the address or association no longer exists.
func IsNotFound(err error) bool {
	switch ErrorCode(err) {
	case "InvalidAllocationID.NotFound", "InvalidAssociationID.NotFound", "InvalidAddress.NotFound":
		return true
	}
	return false
}

func (c *Client) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.CallTimeout)
}

func (c *Client) managedFilters() []types.Filter {
	return []types.Filter{
		{Name: aws.String("tag:" + decide.TagManaged), Values: []string{"true"}},
		{Name: aws.String("tag:" + decide.TagCluster), Values: []string{c.clusterID}},
	}
}

// ListManaged returns every address tagged as managed by this cluster,
// ordered by allocation ID.
func (c *Client) ListManaged(ctx context.Context) ([]decide.Address, error) {
	return c.describe(ctx, c.managedFilters())
}

// LookupByNode returns the addresses tagged for node.
func (c *Client) LookupByNode(ctx context.Context, node string) ([]decide.Address, error) {
	return c.describe(ctx, append(c.managedFilters(), types.Filter{Name: aws.String("tag:" + decide.TagNode), Values: []string{node}}))
}

func (c *Client) describe(ctx context.Context, filters []types.Filter) ([]decide.Address, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	out, err := c.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: filters})
	if err != nil {
		return nil, fmt.Errorf("describe addresses: %w", err)
	}
	addrs := make([]decide.Address, 0, len(out.Addresses))
	for _, a := range out.Addresses {
		// The filter asked for exactly our tag; an endpoint that matched
		// more (a wildcard, a case-insensitive compatible server) must never
		// hand eipd another cluster's address to release.
		if tagValue(a.Tags, decide.TagCluster) != c.clusterID {
			continue
		}
		addrs = append(addrs, fromEC2(a))
	}
	slices.SortFunc(addrs, func(x, y decide.Address) int {
		switch {
		case x.AllocationID < y.AllocationID:
			return -1
		case x.AllocationID > y.AllocationID:
			return 1
		}
		return 0
	})
	return addrs, nil
}

func tagValue(tags []types.Tag, key string) string {
	for _, t := range tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

func fromEC2(a types.Address) decide.Address {
	out := decide.Address{
		AllocationID:       aws.ToString(a.AllocationId),
		PublicIP:           aws.ToString(a.PublicIp),
		AssociationID:      aws.ToString(a.AssociationId),
		InstanceID:         aws.ToString(a.InstanceId),
		NetworkInterfaceID: aws.ToString(a.NetworkInterfaceId),
		PrivateIP:          aws.ToString(a.PrivateIpAddress),
		Tags:               make(map[string]string, len(a.Tags)),
	}
	for _, t := range a.Tags {
		out.Tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
		switch aws.ToString(t.Key) {
		case decide.TagNode:
			out.Node = aws.ToString(t.Value)
		case decide.TagAllocatedAt:
			if at, err := time.Parse(time.RFC3339Nano, aws.ToString(t.Value)); err == nil {
				out.AllocatedAt = at
			}
		}
	}
	return out
}

// Allocate gives node an address tagged for it. It looks the Node's tag up
// first and returns an existing address if there is one (except the
// allocation IDs in skip: addresses the caller will not use, such as one
// held outside the cluster); otherwise it sends
// one AllocateAddress with retries off. If that fails in a way that may have
// allocated, it looks the tag up again; when still nothing is listed the
// error wraps ErrUncertain.
func (c *Client) Allocate(ctx context.Context, node string, skip map[string]bool) (decide.Address, error) {
	if existing, err := c.lookupFor(ctx, node, skip); err != nil {
		return decide.Address{}, err
	} else if len(existing) > 0 {
		return existing[0], nil
	}
	now := time.Now().UTC()
	callCtx, cancel := c.call(ctx)
	defer cancel()
	var pool *string
	if c.cfg.PublicIPv4Pool != "" {
		pool = aws.String(c.cfg.PublicIPv4Pool)
	}
	out, err := c.ec2.AllocateAddress(callCtx, &ec2.AllocateAddressInput{
		Domain:         types.DomainTypeVpc,
		PublicIpv4Pool: pool,
		TagSpecifications: []types.TagSpecification{{
			ResourceType: types.ResourceTypeElasticIp,
			Tags: []types.Tag{
				{Key: aws.String(decide.TagManaged), Value: aws.String("true")},
				{Key: aws.String(decide.TagCluster), Value: aws.String(c.clusterID)},
				{Key: aws.String(decide.TagNode), Value: aws.String(node)},
				{Key: aws.String(decide.TagAllocatedAt), Value: aws.String(now.Format(time.RFC3339Nano))},
			},
		}},
	}, func(o *ec2.Options) { o.Retryer = aws.NopRetryer{} })
	if err == nil {
		return decide.Address{
			AllocationID: aws.ToString(out.AllocationId),
			PublicIP:     aws.ToString(out.PublicIp),
			Node:         node,
			AllocatedAt:  now,
		}, nil
	}
	if !mayHaveAllocated(err) {
		return decide.Address{}, fmt.Errorf("allocate address for node %s: %w", node, err)
	}
	existing, lerr := c.lookupFor(ctx, node, skip)
	if lerr != nil {
		c.metrics.uncertain.Inc()
		return decide.Address{}, fmt.Errorf("allocate address for node %s: %w (%w; and the lookup after it failed: %v)", node, ErrUncertain, err, lerr)
	}
	if len(existing) > 0 {
		return existing[0], nil
	}
	c.metrics.uncertain.Inc()
	return decide.Address{}, fmt.Errorf("allocate address for node %s: %w: %w", node, ErrUncertain, err)
}

// lookupFor returns the addresses tagged for node, without those in skip.
func (c *Client) lookupFor(ctx context.Context, node string, skip map[string]bool) ([]decide.Address, error) {
	all, err := c.LookupByNode(ctx, node)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(a decide.Address) bool { return skip[a.AllocationID] }), nil
}

// mayHaveAllocated is false only for answers EC2 gives before acting: a 4xx
// API error (throttling, limits, bad requests). A 5xx, a timeout or a lost
// response leaves the outcome unknown.
func mayHaveAllocated(err error) bool {
	// A throttled request was refused before it ran, whatever its status.
	if _, throttled := retry.DefaultThrottleErrorCodes[ErrorCode(err)]; throttled {
		return false
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() >= 400 && re.HTTPStatusCode() < 500 {
		return false
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient {
		return false
	}
	return true
}

// TagNode tags an orphan for node.
func (c *Client) TagNode(ctx context.Context, allocationID, node string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.ec2.CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: []string{allocationID},
		Tags:      []types.Tag{{Key: aws.String(decide.TagNode), Value: aws.String(node)}},
	})
	if err != nil {
		return fmt.Errorf("tag address %s for node %s: %w", allocationID, node, err)
	}
	return nil
}

// UntagNode removes the Node tag: the address becomes an orphan.
func (c *Client) UntagNode(ctx context.Context, allocationID string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.ec2.DeleteTags(ctx, &ec2.DeleteTagsInput{
		Resources: []string{allocationID},
		Tags:      []types.Tag{{Key: aws.String(decide.TagNode)}},
	})
	if err != nil {
		return fmt.Errorf("untag address %s: %w", allocationID, err)
	}
	return nil
}

// Associate associates the address with the target's network interface and
// private IP, taking it over if it is associated elsewhere.
func (c *Client) Associate(ctx context.Context, allocationID string, t decide.Target) (string, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	out, err := c.ec2.AssociateAddress(ctx, &ec2.AssociateAddressInput{
		AllocationId:       aws.String(allocationID),
		NetworkInterfaceId: aws.String(t.NetworkInterfaceID),
		PrivateIpAddress:   aws.String(t.PrivateIP),
		AllowReassociation: aws.Bool(true),
	})
	if err != nil {
		return "", fmt.Errorf("associate address %s with %s/%s: %w", allocationID, t.NetworkInterfaceID, t.PrivateIP, err)
	}
	return aws.ToString(out.AssociationId), nil
}

// Disassociate removes an association; one already gone is not an error.
func (c *Client) Disassociate(ctx context.Context, associationID string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.ec2.DisassociateAddress(ctx, &ec2.DisassociateAddressInput{AssociationId: aws.String(associationID)})
	if err != nil && !IsNotFound(err) {
		return fmt.Errorf("disassociate %s: %w", associationID, err)
	}
	return nil
}

// Release releases an address; one already gone is not an error.
func (c *Client) Release(ctx context.Context, allocationID string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.ec2.ReleaseAddress(ctx, &ec2.ReleaseAddressInput{AllocationId: aws.String(allocationID)})
	if err != nil && !IsNotFound(err) {
		return fmt.Errorf("release address %s: %w", allocationID, err)
	}
	return nil
}

// ErrNoPrimaryInterface means the instance has no network interface at
// device index 0 (yet): it is still being launched, or it is gone.
var ErrNoPrimaryInterface = errors.New("instance has no primary network interface")

// Instances describes instances in one call and returns those EC2 lists, by
// ID. It filters on instance-id rather than naming InstanceIds, so that an
// instance that no longer exists (or never did: a Node may name anything)
// is simply absent instead of failing the whole call.
func (c *Client) Instances(ctx context.Context, ids []string) (map[string]decide.Instance, error) {
	out := map[string]decide.Instance{}
	if len(ids) == 0 {
		return out, nil
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	ctx, cancel := c.call(ctx)
	defer cancel()
	p := ec2.NewDescribeInstancesPaginator(c.ec2, &ec2.DescribeInstancesInput{
		Filters: []types.Filter{{Name: aws.String("instance-id"), Values: ids}},
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return out, fmt.Errorf("describe instances (instance-id %s): %w", strings.Join(ids, ","), err)
		}
		for _, r := range page.Reservations {
			for _, inst := range r.Instances {
				if d := fromInstance(inst); slices.Contains(ids, d.ID) { // never more than asked
					out[d.ID] = d
				}
			}
		}
	}
	return out, nil
}

// InterfaceOwners returns the instances the associated addresses among addrs
// are associated with, by the ID of the network interface the association
// goes through. An interface of no instance (a NAT gateway's, a load
// balancer's) is absent. EC2 names the instance of most associations: those
// cost one DescribeInstances for all; an association that names only its
// interface costs one DescribeNetworkInterfaces more, for all of them.
func (c *Client) InterfaceOwners(ctx context.Context, addrs []decide.Address) (map[string]decide.Instance, error) {
	byENI := map[string]string{} // interface → instance
	var unnamed []string
	for _, a := range addrs {
		switch {
		case !a.Associated() || a.NetworkInterfaceID == "":
		case a.InstanceID != "":
			byENI[a.NetworkInterfaceID] = a.InstanceID
		default:
			unnamed = append(unnamed, a.NetworkInterfaceID)
		}
	}
	if len(unnamed) > 0 {
		unnamed = slices.Compact(slices.Sorted(slices.Values(unnamed)))
		callCtx, cancel := c.call(ctx)
		p := ec2.NewDescribeNetworkInterfacesPaginator(c.ec2, &ec2.DescribeNetworkInterfacesInput{
			Filters: []types.Filter{{Name: aws.String("network-interface-id"), Values: unnamed}},
		})
		for p.HasMorePages() {
			page, err := p.NextPage(callCtx)
			if err != nil {
				cancel()
				return nil, fmt.Errorf("describe network interfaces %s: %w", strings.Join(unnamed, ","), err)
			}
			for _, ni := range page.NetworkInterfaces {
				id := aws.ToString(ni.NetworkInterfaceId)
				if ni.Attachment != nil && aws.ToString(ni.Attachment.InstanceId) != "" && slices.Contains(unnamed, id) {
					byENI[id] = aws.ToString(ni.Attachment.InstanceId)
				}
			}
		}
		cancel()
	}
	insts, err := c.Instances(ctx, slices.Collect(maps.Values(byENI)))
	if err != nil {
		return nil, err
	}
	out := map[string]decide.Instance{}
	for eni, id := range byENI {
		if inst, ok := insts[id]; ok {
			out[eni] = inst
		}
	}
	return out, nil
}

func fromInstance(inst types.Instance) decide.Instance {
	id := aws.ToString(inst.InstanceId)
	out := decide.Instance{ID: id, VPCID: aws.ToString(inst.VpcId), Tags: map[string]string{}}
	if inst.Placement != nil {
		out.Zone = aws.ToString(inst.Placement.AvailabilityZone)
	}
	for _, t := range inst.Tags {
		out.Tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	for _, ni := range inst.NetworkInterfaces {
		if ni.Attachment == nil || aws.ToInt32(ni.Attachment.DeviceIndex) != 0 {
			continue
		}
		ip := aws.ToString(ni.PrivateIpAddress)
		for _, p := range ni.PrivateIpAddresses {
			if aws.ToBool(p.Primary) {
				ip = aws.ToString(p.PrivateIpAddress)
			}
		}
		if ip != "" {
			out.Primary = decide.Target{InstanceID: id, NetworkInterfaceID: aws.ToString(ni.NetworkInterfaceId), PrivateIP: ip}
		}
		break
	}
	return out
}

// PrimaryTarget returns the primary private IP of the primary network
// interface (device index 0) of an instance.
func (c *Client) PrimaryTarget(ctx context.Context, instanceID string) (decide.Target, error) {
	insts, err := c.Instances(ctx, []string{instanceID})
	if err != nil {
		return decide.Target{}, err
	}
	if t := insts[instanceID].Primary; t.NetworkInterfaceID != "" {
		return t, nil
	}
	return decide.Target{}, fmt.Errorf("instance %s: %w", instanceID, ErrNoPrimaryInterface)
}
