// Package server serves ipledger.ipam.v1.IPAMService. Reads are answered on
// every replica from the ledger as streamed (the ledger ConfigMaps through
// pkg/stream) and the streamed pools and Services; whatever a read needs
// that is costly — the parsed ledger, the allocator ExplainService asks, the
// pools' usage — is built once per change of the ledger or the pools, never
// per call (readstate.go, docs/ipam-api.md). Reservations are made through
// the leader's term, and a standby refuses them naming the leader.
package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/stream"
	"github.com/ipledger/ipledger/pkg/stream/objkey"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/announce"
	"github.com/ipledger/ipledger/services/ipam/internal/announced"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/poolstate"
	"github.com/ipledger/ipledger/services/ipam/internal/preview"
)

// Rules is the authorization table of IPAMService: reads need `allocations`
// list (List*) or get (Get/Explain/Preview), mutations `reservations`
// create/delete. PreviewPool writes nothing and tells what ListPools and
// ExplainService tell (the pools, which Service holds or waits for what):
// the viewer's verbs suffice.
func Rules() authz.Rules {
	const p = "/" + "ipledger.ipam.v1.IPAMService" + "/"
	return authz.Rules{
		p + "ListAllocations":    {Verb: "list", Resource: "allocations"},
		p + "ListPools":          {Verb: "list", Resource: "allocations"},
		p + "GetAllocation":      {Verb: "get", Resource: "allocations"},
		p + "ExplainService":     {Verb: "get", Resource: "allocations"},
		p + "PreviewPool":        {Verb: "get", Resource: "allocations"},
		p + "ReserveAddress":     {Verb: "create", Resource: "reservations"},
		p + "ReleaseReservation": {Verb: "delete", Resource: "reservations"},
		p + "AddressHistory":     {Verb: "get", Resource: "history", Namespaced: true},
	}
}

// Mutator applies reservations through the leader's term (the controller).
type Mutator interface {
	Reserve(ctx context.Context, r ledger.Reservation) (ledger.Reservation, error)
	Unreserve(ctx context.Context, ip netip.Addr) (ledger.Reservation, error)
}

// Config says where the ledger and the Lease are.
type Config struct {
	Namespace string
	LeaseName string
	// LBClass is the class served (--lb-class): the controller's, already
	// defaulted by its Config.Defaults; empty serves class-less Services only.
	LBClass string
	// RequireLBClass: class-less Services are not ipam's (--require-lb-class).
	RequireLBClass bool
	// GatewayServiceNamespaces: --gateway-service-namespaces.
	GatewayServiceNamespaces []string
	// KeepReleased: --keep-released-addresses (objects.PoolSet).
	KeepReleased time.Duration
	// Registerer takes the API's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Access answers which namespaces a caller of a Namespaced method may
	// read (the Authorizer); nil: every caller reads every namespace.
	Access Access
}

// Access is authz.Authorizer's namespaced answer.
type Access interface {
	AllowedIn(ctx context.Context, namespace string) (bool, error)
}

// env finds, in the stream, what requests depend on besides the Services:
// a new one for each decision (objects.Memo).
func (s *Server) env() objects.Env {
	return objects.Env{Objects: objects.Memo(s.store()), GatewayServiceNamespaces: s.cfg.GatewayServiceNamespaces}
}

func (s *Server) class() objects.Class {
	return objects.Class{Name: s.cfg.LBClass, Required: s.cfg.RequireLBClass}
}

// Server implements ipamv1grpc.IPAMServiceServer.
type Server struct {
	ipamv1grpc.UnimplementedIPAMServiceServer
	cfg     Config
	store   func() *stream.Store
	client  kubernetes.Interface
	mutator Mutator
	log     *slog.Logger
	m       *metrics

	pools objects.PoolSet // remembers each IPPool's last valid spec, as the leader does

	ledgerMu sync.Mutex
	ledger   *parsedLedger
	good     ledger.State // the last ledger that parsed

	stateMu sync.Mutex
	state   *readState

	explain coalesced[*explainState]
	usage   coalesced[*usageState]
	listing coalesced[*listState]

	// history is the address history last read, at historyRead
	// (historyEntries).
	historyMu   sync.Mutex
	history     []history.Entry
	historyRead time.Time

	// previews lets one PreviewPool decide at a time: each rebuilds and
	// decides the whole allocator (≈ the cost of a term start).
	previews chan struct{}
}

// New builds the server. store returns the stream's store.
func New(cfg Config, store func() *stream.Store, client kubernetes.Interface, mutator Mutator, log *slog.Logger) (*Server, error) {
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, store: store, client: client, mutator: mutator, log: log, m: m,
		pools: objects.PoolSet{KeepReleased: cfg.KeepReleased}, previews: make(chan struct{}, 1)}, nil
}

const (
	defaultPageSize = 500
	maxPageSize     = 5000
)

func toProto(a ledger.Allocation) *ipamv1.Allocation {
	out := &ipamv1.Allocation{
		Ip: a.IP.String(), Pool: a.Pool, SharingKey: a.SharingKey,
		Service: &ipamv1.ServiceRef{Namespace: a.Service.Namespace, Name: a.Service.Name, Uid: a.Service.UID},
	}
	if !a.AllocatedAt.IsZero() {
		out.AllocatedAt = a.AllocatedAt.UTC().Format(time.RFC3339)
	}
	return out
}

// entryProto is an entry as the API shows it: a kept address with
// kept_until set (always: it is what tells it from a held one).
func entryProto(e entry) *ipamv1.Allocation {
	out := toProto(e.Allocation)
	if e.kept {
		out.KeptUntil = e.until.UTC().Format(time.RFC3339)
	}
	return out
}

func reservationProto(r ledger.Reservation) *ipamv1.Reservation {
	out := &ipamv1.Reservation{Ip: r.IP.String(), OwnerNote: r.Note}
	if !r.CreatedAt.IsZero() {
		out.CreatedAt = r.CreatedAt.UTC().Format(time.RFC3339)
	}
	if r.ForService != nil {
		out.ForService = &ipamv1.ServiceRef{Namespace: r.ForService.Namespace, Name: r.ForService.Name, Uid: r.ForService.UID}
	}
	return out
}

// position is where an entry of ListAllocations stands: by IP, then
// Service, an address a Service holds before the same address kept for it
// (the ledger should not hold both, but a page token must name one).
type position struct {
	ledger.Allocation
	kept bool
}

func comparePositions(a, b position) int {
	if c := ledger.CompareAllocations(a.Allocation, b.Allocation); c != 0 {
		return c
	}
	switch {
	case a.kept == b.kept:
		return 0
	case b.kept:
		return -1
	}
	return 1
}

// entry is one entry of ListAllocations and GetAllocation: an address a
// Service holds, or one kept for a Service that released it until until.
type entry struct {
	position
	until time.Time
}

// pageToken is opaque to callers: the last entry's IP and Service, and
// " kept" when it is a kept address (a token without it, as ipam before
// kept addresses wrote, names a held one).
func pageToken(p position) string {
	s := p.IP.String() + " " + p.Service.Key()
	if p.kept {
		s += " kept"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func parsePageToken(tok string) (position, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return position{}, err
	}
	ipStr, rest, ok := strings.Cut(string(b), " ")
	if !ok {
		return position{}, errors.New("malformed")
	}
	svc, flag, _ := strings.Cut(rest, " ")
	if flag != "" && flag != "kept" {
		return position{}, errors.New("malformed")
	}
	ip, err := netip.ParseAddr(ipStr)
	if err != nil {
		return position{}, err
	}
	ns, name, _ := strings.Cut(svc, "/")
	return position{Allocation: ledger.Allocation{IP: ip, Service: ledger.ServiceRef{Namespace: ns, Name: name}}, kept: flag == "kept"}, nil
}

// ListAllocations pages through the allocations, and the addresses kept
// for Services that released them, in IP order.
func (s *Server) ListAllocations(ctx context.Context, req *ipamv1.ListAllocationsRequest) (*ipamv1.ListAllocationsResponse, error) {
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	ls, err := s.listState(ctx)
	if err != nil {
		return nil, err
	}
	return listPage(ls.ledger.Allocations, ls.kept, req, size)
}

// pageSize is a request's page_size, checked, 0 the default.
func pageSize(n int32) (int, error) {
	size := int(n)
	switch {
	case size < 0:
		return 0, status.Errorf(codes.InvalidArgument, "page_size: %d is negative; use 0 for the default of %d, or up to %d", size, defaultPageSize, maxPageSize)
	case size > maxPageSize:
		return 0, status.Errorf(codes.InvalidArgument, "page_size: %d is more than %d; ask for at most %d and follow next_page_token", size, maxPageSize, maxPageSize)
	case size == 0:
		size = defaultPageSize
	}
	return size, nil
}

// listPage returns one page of allocs (sorted by ledger.CompareAllocations)
// and kept (sorted by comparePositions) merged in IP order: a binary search
// of each to the page token, then at most size matching entries, so its
// cost follows the page size, not the ledger's.
func listPage(allocs []ledger.Allocation, kept []entry, req *ipamv1.ListAllocationsRequest, size int) (*ipamv1.ListAllocationsResponse, error) {
	i, j := 0, 0
	if tok := req.GetPageToken(); tok != "" {
		after, err := parsePageToken(tok)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, "page_token: not a token from next_page_token; omit it to start from the first page")
		}
		// The first entry of each after the token.
		i, _ = slices.BinarySearchFunc(allocs, after, func(a ledger.Allocation, p position) int { return comparePositions(position{Allocation: a}, p) })
		if i < len(allocs) && comparePositions(position{Allocation: allocs[i]}, after) == 0 {
			i++
		}
		j, _ = slices.BinarySearchFunc(kept, after, func(e entry, p position) int { return comparePositions(e.position, p) })
		if j < len(kept) && comparePositions(kept[j].position, after) == 0 {
			j++
		}
	}
	resp := &ipamv1.ListAllocationsResponse{}
	var last position
	for {
		var e entry
		switch {
		case i < len(allocs) && (j == len(kept) || comparePositions(position{Allocation: allocs[i]}, kept[j].position) < 0):
			e = entry{position: position{Allocation: allocs[i]}}
			i++
		case j < len(kept):
			e = kept[j]
			j++
		default:
			return resp, nil
		}
		if (req.GetPool() != "" && e.Pool != req.GetPool()) || (req.GetNamespace() != "" && e.Service.Namespace != req.GetNamespace()) {
			continue
		}
		if len(resp.Allocations) == size {
			// More match: the token names the last one returned.
			resp.NextPageToken = pageToken(last)
			return resp, nil
		}
		resp.Allocations = append(resp.Allocations, entryProto(e))
		last = e.position
	}
}

func checkServiceRef(field string, ref *ipamv1.ServiceRef) error {
	switch {
	case ref == nil:
		return status.Errorf(codes.InvalidArgument, "%s: required; give namespace and name", field)
	case ref.GetNamespace() == "":
		return status.Errorf(codes.InvalidArgument, "%s.namespace: required", field)
	case ref.GetName() == "":
		return status.Errorf(codes.InvalidArgument, "%s.name: required", field)
	case strings.Contains(ref.GetNamespace(), "/") || strings.Contains(ref.GetName(), "/"):
		return status.Errorf(codes.InvalidArgument, "%s: namespace and name must not contain '/'", field)
	}
	return nil
}

func parseIPField(field, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, status.Errorf(codes.InvalidArgument, "%s: required, e.g. 10.0.0.5 or 2001:db8::5", field)
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || ip.Zone() != "" || ip.Is4In6() {
		return netip.Addr{}, status.Errorf(codes.InvalidArgument, "%s: %q is not an IPv4 or IPv6 address, e.g. 10.0.0.5 or 2001:db8::5", field, s)
	}
	return ip, nil
}

// GetAllocation returns the allocations of one IP or one Service, and the
// addresses kept for a Service that released them.
func (s *Server) GetAllocation(ctx context.Context, req *ipamv1.GetAllocationRequest) (*ipamv1.GetAllocationResponse, error) {
	ls, err := s.listState(ctx)
	if err != nil {
		return nil, err
	}
	st := ls.ledger
	resp := &ipamv1.GetAllocationResponse{}
	switch sel := req.GetSelector().(type) {
	case *ipamv1.GetAllocationRequest_Ip:
		ip, err := parseIPField("ip", sel.Ip)
		if err != nil {
			return nil, err
		}
		i, _ := slices.BinarySearchFunc(st.Allocations, ip, func(a ledger.Allocation, ip netip.Addr) int { return a.IP.Compare(ip) })
		for ; i < len(st.Allocations) && st.Allocations[i].IP == ip; i++ {
			resp.Allocations = append(resp.Allocations, toProto(st.Allocations[i]))
		}
		j, _ := slices.BinarySearchFunc(ls.kept, ip, func(e entry, ip netip.Addr) int { return e.IP.Compare(ip) })
		for ; j < len(ls.kept) && ls.kept[j].IP == ip; j++ {
			resp.Allocations = append(resp.Allocations, entryProto(ls.kept[j]))
		}
		for _, r := range st.Reservations {
			if r.IP == ip {
				resp.Reservation = reservationProto(r)
			}
		}
		if len(resp.Allocations) == 0 && resp.Reservation == nil {
			return nil, status.Errorf(codes.NotFound, "no Service holds %s and it is not reserved", ip)
		}
	case *ipamv1.GetAllocationRequest_Service:
		if err := checkServiceRef("service", sel.Service); err != nil {
			return nil, err
		}
		ns, name := sel.Service.GetNamespace(), sel.Service.GetName()
		var found []entry
		for _, a := range st.Allocations {
			if a.Service.Namespace == ns && a.Service.Name == name {
				found = append(found, entry{position: position{Allocation: a}})
			}
		}
		for _, e := range ls.kept {
			if e.Service.Namespace == ns && e.Service.Name == name {
				found = append(found, e)
			}
		}
		if len(found) == 0 {
			return nil, status.Errorf(codes.NotFound, "Service %s/%s holds no address and none is kept for it; ExplainService says why", ns, name)
		}
		slices.SortStableFunc(found, func(x, y entry) int { return comparePositions(x.position, y.position) })
		for _, e := range found {
			resp.Allocations = append(resp.Allocations, entryProto(e))
		}
	default:
		return nil, status.Error(codes.InvalidArgument, "selector: set ip or service")
	}
	return resp, nil
}

// ListPools lists every IPPool with its usage (as the ledger counts it) and
// conditions (as the leader last wrote them). The usage is computed once per
// change of the ledger or the pools, not per call.
func (s *Server) ListPools(ctx context.Context, req *ipamv1.ListPoolsRequest) (*ipamv1.ListPoolsResponse, error) {
	rs, err := s.readState()
	if err != nil {
		return nil, err
	}
	us, err := s.usage.get(ctx, rs.seq, s.buildUsage)
	if err != nil {
		return nil, err
	}
	resp := &ipamv1.ListPoolsResponse{}
	for _, o := range us.pools {
		p := o.GetIpPool()
		out := &ipamv1.Pool{
			Name: o.GetMeta().GetName(), Addresses: p.GetAddresses(), AutoAssign: p.GetAutoAssign(),
			Priority: p.GetAllocation().GetPriority(),
			Ipv4:     poolstate.ZeroProto(), Ipv6: poolstate.ZeroProto(),
		}
		if u, ok := us.usage[out.Name]; ok {
			out.Ipv4, out.Ipv6 = proto.CloneOf(u.v4), proto.CloneOf(u.v6)
		}
		out.HeldOutside = int64(us.heldOutside[out.Name])
		out.Kept = int64(us.kept[out.Name])
		for _, c := range p.GetConditions() {
			out.Conditions = append(out.Conditions, &ipamv1.PoolCondition{Type: c.GetType(), Status: c.GetStatus(), Reason: c.GetReason(), Message: c.GetMessage()})
		}
		resp.Pools = append(resp.Pools, out)
	}
	return resp, nil
}

// ExplainService says why a Service has, or has not, got its IP.
func (s *Server) ExplainService(ctx context.Context, req *ipamv1.ExplainServiceRequest) (*ipamv1.ExplainServiceResponse, error) {
	if err := checkServiceRef("service", req.GetService()); err != nil {
		return nil, err
	}
	ns, name := req.GetService().GetNamespace(), req.GetService().GetName()
	obj, ok := s.store().Get(watcherv1.Kind_KIND_SERVICE, ns, name)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Service %s/%s does not exist (or the watcher has not shown it yet)", ns, name)
	}
	if !s.class().Serves(obj) {
		served := fmt.Sprintf("unset or %q", s.cfg.LBClass)
		if s.cfg.RequireLBClass {
			served = fmt.Sprintf("%q (--require-lb-class: Services without a class are left to other controllers)", s.cfg.LBClass)
		}
		return &ipamv1.ExplainServiceResponse{
			Decision: fmt.Sprintf("ipam does not serve this Service: it serves type LoadBalancer Services whose spec.loadBalancerClass is %s (this one: type %s, class %q).",
				served, obj.GetService().GetType(), obj.GetService().GetLoadBalancerClass()),
		}, nil
	}
	rs, err := s.readState()
	if err != nil {
		return nil, err
	}
	ex, err := s.explain.get(ctx, rs.seq, s.buildExplain)
	if err != nil {
		return nil, err
	}
	// The request, the Service's labels and its Namespace's labels are read
	// now; the allocator holds only what the ledger, the pools and the other
	// Services say.
	areq, perr := objects.Request(obj, s.env())
	resp := &ipamv1.ExplainServiceResponse{Announcements: s.announcements(obj)}
	if link, ok, _ := objects.LinkedGateway(obj, s.cfg.GatewayServiceNamespaces); ok {
		resp.Gateway = link.Key()
	}
	if perr != nil {
		resp.Reason = string(allocator.ReasonInvalidRequest)
		resp.Decision = "The Service gets no IP: its request is invalid: " + perr.Error()
		ex.mu.Lock()
		held := ex.alloc.Allocations(objkey.Of(obj))
		ex.mu.Unlock()
		for _, a := range held {
			resp.Ips = append(resp.Ips, a.IP.String())
		}
		return resp, nil
	}
	ex.mu.Lock()
	x := ex.alloc.Explain(areq)
	ex.mu.Unlock()
	resp.Reason, resp.Decision = string(x.Reason), x.Decision
	for _, ip := range x.IPs {
		resp.Ips = append(resp.Ips, ip.String())
	}
	for _, v := range x.Verdicts {
		resp.Verdicts = append(resp.Verdicts, &ipamv1.PoolVerdict{Pool: v.Pool, Eligible: v.Eligible, Reason: string(v.Reason), Message: v.Message})
	}
	return resp, nil
}

// announcements say whether each address in the Service's status is
// announced, from what the announcers publish in this replica's stream
// (package announce).
func (s *Server) announcements(obj *watcherv1.Object) []*ipamv1.Announcement {
	var out []*ipamv1.Announcement
	for _, v := range announced.World(s.store(), &s.pools).Decide(announce.ServiceOf(obj), time.Now()) {
		a := &ipamv1.Announcement{Ip: v.IP.String(), State: v.State.String(), Announcer: v.Announcer, Node: v.Node, Served: v.Served, Message: v.Message}
		if !v.Since.IsZero() {
			a.Since = v.Since.UTC().Format(time.RFC3339)
		}
		out = append(out, a)
	}
	return out
}

// PreviewPool says what applying an IPPool manifest, or deleting the pool,
// would do, deciding with the leader's code on a copy of this replica's read
// state (package preview). Nothing is written, and nothing is remembered:
// not even the previewed spec as a pool's last valid one.
func (s *Server) PreviewPool(ctx context.Context, req *ipamv1.PreviewPoolRequest) (*ipamv1.PreviewPoolResponse, error) {
	c, err := preview.Parse(req.GetManifest(), req.GetDelete())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "manifest: %v", err)
	}
	select {
	case s.previews <- struct{}{}:
		defer func() { <-s.previews }()
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	rs, err := s.readState()
	if err != nil {
		return nil, err
	}
	resp, err := preview.Run(preview.Inputs{
		Ledger: rs.ledger, Pools: rs.pools, Services: s.store().List(watcherv1.Kind_KIND_SERVICE), Env: s.env(),
		PoolSet: &s.pools, Class: s.class(), Now: time.Now(),
	}, c)
	if errors.Is(err, preview.ErrNoSuchPool) {
		return nil, status.Errorf(codes.NotFound, "manifest: %v", err)
	}
	return resp, err
}

// ReserveAddress holds an IP outside any Service, through the leader.
func (s *Server) ReserveAddress(ctx context.Context, req *ipamv1.ReserveAddressRequest) (*ipamv1.ReserveAddressResponse, error) {
	ip, err := parseIPField("ip", req.GetIp())
	if err != nil {
		return nil, err
	}
	note := strings.TrimSpace(req.GetOwnerNote())
	if note == "" {
		return nil, status.Error(codes.InvalidArgument, "owner_note: required; say who holds the IP and why")
	}
	if ledger.IsKeptNote(note) {
		return nil, status.Errorf(codes.InvalidArgument, "owner_note: %q is the form of the records ipam writes for addresses it keeps for Services "+
			"that released them, which only ipam writes; write a note that does not start %q, saying who holds the IP and why", note, ledger.KeptNote(""))
	}
	r := ledger.Reservation{IP: ip, Note: note, CreatedAt: time.Now().UTC().Truncate(time.Second)}
	if fs := req.GetForService(); fs != nil && (fs.GetNamespace() != "" || fs.GetName() != "") {
		if err := checkServiceRef("for_service", fs); err != nil {
			return nil, err
		}
		r.ForService = &ledger.ServiceRef{Namespace: fs.GetNamespace(), Name: fs.GetName()}
	}
	out, err := s.mutator.Reserve(ctx, r)
	if err != nil {
		return nil, s.mutationError(ctx, err)
	}
	return &ipamv1.ReserveAddressResponse{Reservation: reservationProto(out)}, nil
}

// ReleaseReservation gives a reserved IP back, through the leader.
func (s *Server) ReleaseReservation(ctx context.Context, req *ipamv1.ReleaseReservationRequest) (*ipamv1.ReleaseReservationResponse, error) {
	ip, err := parseIPField("ip", req.GetIp())
	if err != nil {
		return nil, err
	}
	out, err := s.mutator.Unreserve(ctx, ip)
	if err != nil {
		if errors.Is(err, controller.ErrNotReserved) {
			return nil, status.Errorf(codes.NotFound, "ip: %s is not reserved", ip)
		}
		return nil, s.mutationError(ctx, err)
	}
	return &ipamv1.ReleaseReservationResponse{Reservation: reservationProto(out)}, nil
}

// NotLeaderMessage starts the FailedPrecondition message of a reservation
// sent to a standby (the aggregated API answers it with 503 and
// Retry-After, so that the client retries and reaches the leader).
const NotLeaderMessage = "this replica is not the leader"

// IsNotLeader reports whether err is a standby's refusal of a reservation.
func IsNotLeader(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.FailedPrecondition && strings.HasPrefix(st.Message(), NotLeaderMessage)
}

func (s *Server) mutationError(ctx context.Context, err error) error {
	var ae *allocator.Error
	switch {
	case errors.Is(err, controller.ErrNotLeader):
		return status.Errorf(codes.FailedPrecondition, "%s; send reservations to the leader, %s", NotLeaderMessage, s.leaderIdentity(ctx))
	case errors.As(err, &ae):
		return status.Errorf(codes.FailedPrecondition, "ip: %s", ae.Message)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Unavailable, "%v; retry", err)
}

// leaderIdentity reads the holder of the ipam Lease.
func (s *Server) leaderIdentity(ctx context.Context) string {
	if s.client == nil || s.cfg.LeaseName == "" {
		return "unknown"
	}
	lease, err := s.client.CoordinationV1().Leases(s.cfg.Namespace).Get(ctx, s.cfg.LeaseName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "but no replica holds the Lease " + s.cfg.LeaseName + " yet"
	case err != nil:
		return fmt.Sprintf("unknown (reading Lease %s/%s: %v)", s.cfg.Namespace, s.cfg.LeaseName, err)
	case lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "":
		return "but the Lease " + s.cfg.LeaseName + " has no holder right now"
	}
	return fmt.Sprintf("%q (holder of Lease %s/%s)", *lease.Spec.HolderIdentity, s.cfg.Namespace, s.cfg.LeaseName)
}
