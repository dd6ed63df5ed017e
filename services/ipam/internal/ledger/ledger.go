package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/metaonly"
	"github.com/ipledger/ipledger/pkg/parallel"
	"github.com/ipledger/ipledger/pkg/promreg"
)

// ErrFenced means a later term has fenced the ledger, or this term no longer
// holds the lease: it must not write again.
var ErrFenced = errors.New("ledger was fenced by a newer lease term")

// ErrStaleWrite means the ledger was changed by another writer while this term
// still holds the lease (a backup was restored, a shard edited or deleted by
// hand). The ledger is still this term's to write: open it again, which
// fences it anew.
var ErrStaleWrite = errors.New("the ledger was rewritten while this term holds the lease")

// ErrReleased means this term released the ledger (Release): it writes
// nothing more.
var ErrReleased = errors.New("this term released the ledger")

// FieldManager is the field manager of every ledger write of ipam's: a
// shard whose managedFields name another manager, later than ipam's own
// write, was changed by someone else (ForeignWrite). It is ipam's one field
// manager, convert.IPAMFieldManager (the watcher tells ipam's writes apart
// by it).
const FieldManager = convert.IPAMFieldManager

// ForeignWrite is a change to a ledger shard that ipam did not make: the
// ledger admission policy lets only ipam and a break-glass group write it
// (docs/security.md), so this is a restore, a repair, or an attack.
type ForeignWrite struct {
	Shard   string
	Manager string // the field manager that wrote it
	At      time.Time
}

// foreignWrites returns who else wrote cm since ipam last did: every field
// manager but FieldManager whose last write is not older than ipam's.
// Managed fields keep seconds, so a write in the same second as ipam's is
// reported (at most once more, since ipam's next fence is later).
func foreignWrites(cm *corev1.ConfigMap) []ForeignWrite {
	var ours time.Time
	for _, f := range cm.ManagedFields {
		if f.Manager == FieldManager && f.Time != nil && f.Time.After(ours) {
			ours = f.Time.Time
		}
	}
	var out []ForeignWrite
	for _, f := range cm.ManagedFields {
		if f.Manager == FieldManager || f.Time == nil || f.Time.Time.Before(ours) {
			continue
		}
		out = append(out, ForeignWrite{Shard: cm.Name, Manager: f.Manager, At: f.Time.Time})
	}
	return out
}

// CorruptError is a ledger that cannot be read. Allocation stops until a
// person repairs or removes the named shard; ipam never overwrites it.
type CorruptError struct {
	// Shard is the ConfigMap at fault.
	Shard string
	Err   error
}

// Error names the ConfigMap and says allocation is stopped.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("ledger ConfigMap %s cannot be read, allocation is stopped until it is repaired: %v", e.Shard, e.Err)
}

// Unwrap returns why the shard cannot be read.
func (e *CorruptError) Unwrap() error { return e.Err }

// Parse decodes a ledger from the data of its ConfigMaps (by name), as read
// from the API or from the stream. A ConfigMap whose name is not a shard name,
// or a shard the head does not list, is ignored (an interrupted split leaves
// such orphans); a listed shard that does not parse is a *CorruptError.
func Parse(configMaps map[string]map[string]string) (State, Layout, error) {
	shards := map[string]Shard{}
	headData, ok := configMaps[HeadName]
	if !ok {
		for name := range configMaps {
			if _, ok := ShardNumber(name); ok {
				return State{}, nil, &CorruptError{Shard: HeadName, Err: fmt.Errorf("missing, but shard %s exists", name)}
			}
		}
		return State{}, nil, nil
	}
	head, err := Decode(HeadName, headData)
	if err != nil {
		return State{}, nil, &CorruptError{Shard: HeadName, Err: err}
	}
	shards[HeadName] = head
	// The listed shards are decoded on every core: at 100,000 entries the
	// decode was a tenth of a restart, one shard after another.
	listed := make([]Shard, len(head.Index))
	err = parallel.EachErr(len(head.Index), runtime.GOMAXPROCS(0), func(i int) error {
		name := head.Index[i].Name
		data, ok := configMaps[name]
		if !ok {
			return &CorruptError{Shard: name, Err: fmt.Errorf("listed by %s but missing", HeadName)}
		}
		s, err := Decode(name, data)
		if err != nil {
			return &CorruptError{Shard: name, Err: err}
		}
		listed[i] = s
		return nil
	})
	if err != nil {
		return State{}, nil, err
	}
	for _, s := range listed {
		shards[s.Name] = s
	}
	st, layout, err := Assemble(shards)
	if err != nil {
		return State{}, nil, &CorruptError{Shard: HeadName, Err: err}
	}
	return st, layout, nil
}

// Metrics counts the ledger's writes. Build one per process.
type Metrics struct {
	writes  *prometheus.CounterVec
	open    *prometheus.HistogramVec
	opens   *prometheus.CounterVec
	bytes   leader.Gauge
	shards  leader.Gauge
	entries *prometheus.GaugeVec
	foreign *prometheus.CounterVec
}

// Forget stops exporting the ledger's size gauges: they describe the
// ledger as the leader last wrote it, and a standby must not report them.
func (m *Metrics) Forget() {
	if m != nil {
		m.bytes.Forget()
		m.shards.Forget()
		m.entries.Reset()
	}
}

// NewMetrics registers the ledger metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_ipam_ledger_writes_total",
			Help: "Writes of ledger ConfigMaps by result (ok, conflict, fenced, error).",
		}, []string{"result"}),
		open: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ipledger_ipam_ledger_open_duration_seconds",
			Help:    "Time of each step of opening the ledger at the start of a term: read (LIST the ConfigMaps), parse, fence (rewrite every shard, or the head alone after a clean release).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"step"}),
		opens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_ipam_ledger_opens_total",
			Help: "Terms that opened the ledger, by what they rewrote: head (the term before released it cleanly, or there was no ledger) or every-shard (the full fence).",
		}, []string{"fence"}),
		bytes: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_ledger_bytes",
			Help: "Encoded size of the ledger, all shards.",
		}),
		shards: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_ledger_shards",
			Help: "Ledger ConfigMaps in use.",
		}),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_ipam_ledger_entries",
			Help: "Entries in the ledger by kind (allocation, reservation).",
		}, []string{"kind"}),
		foreign: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_ipam_ledger_foreign_writes_total",
			Help: "Writes to a ledger ConfigMap by a field manager other than ipam's, by shard, counted when a term reads the ledger (a restore, a repair, or an attack).",
		}, []string{"shard"}),
	}
	if err := promreg.Register(reg, m.writes, m.open, m.opens, m.bytes, m.shards, m.entries, m.foreign); err != nil {
		return nil, err
	}
	return m, nil
}

// write counts one write of a ledger ConfigMap by result.
func (m *Metrics) write(result string) {
	if m != nil {
		m.writes.WithLabelValues(result).Inc()
	}
}

// opened counts an Open by what it rewrote (fenced: "head" or
// "every-shard") and records how long each step took.
func (m *Metrics) opened(fenced string, read, parse, fence time.Duration) {
	if m != nil {
		m.opens.WithLabelValues(fenced).Inc()
		m.open.WithLabelValues("read").Observe(read.Seconds())
		m.open.WithLabelValues("parse").Observe(parse.Seconds())
		m.open.WithLabelValues("fence").Observe(fence.Seconds())
	}
}

// fenceWriters bounds the shards Open rewrites at once after the head: a
// ledger of 50,000 entries has about 30 shards, and one at a time made the
// fence most of a restart.
const fenceWriters = 8

// Options configure a leader's Ledger.
type Options struct {
	// Namespace holds the ledger ConfigMaps.
	Namespace string
	// Term is the writer's lease term ID; every write is stamped with it,
	// for people: terms are ordered by the ledger's epoch.
	Term string
	// Holds asks the API server whether Term still holds its lease
	// (leader.Term.Holds). Open calls it after reading the ledger and
	// before fencing it, so that a term that won the lease but was paused
	// before opening the ledger cannot fence out the one that replaced it.
	// nil means the caller owns the ledger without a lease (tests, tools).
	Holds func(ctx context.Context) (bool, error)
	// ShardLimit is the encoded size above which a shard is split;
	// 0 means DefaultShardLimit.
	ShardLimit int
	Metrics    *Metrics
	Log        *slog.Logger
}

// Ledger is one term's writer. Build it with Open at the start of a term and
// drop it when the term ends.
type Ledger struct {
	client kubernetes.Interface
	opts   Options

	mu     sync.Mutex
	epoch  uint64       // this term's fencing epoch
	shards []*liveShard // layout order; shards[0] is the head
	maxNum int          // highest shard number of any ledger ConfigMap seen
	// foreign are the writes not made by ipam that the last read found.
	foreign []ForeignWrite
	// addrs indexes the allocations of shards by Service.
	addrs addrIndex
	// lines are the encoded lines of the shards committed last.
	lines lineCache
	// read is the State of the shards as last read or fenced, handed to
	// the first State call after (the term's rebuild, right after Open,
	// which has just assembled and sorted every entry) unless a commit
	// came first; never kept longer, or it would be a second copy of every
	// entry for the whole term.
	read *State
	// fenced is closed once every shard carries this term's epoch, or the
	// fence failed (fenceErr); nothing is committed before.
	fenced   chan struct{}
	fenceErr error
	// unanswered is set once a write of this term failed without the API
	// server's answer that it was not made (the connection broke, it timed
	// out): it may still land, so the term cannot release cleanly.
	unanswered atomic.Bool
	// released is set by Release: the term writes nothing more.
	released bool
}

// adopt takes st, the State of the shards just read or fenced, as what the
// next State call answers (unless a commit comes first), and indexes it by
// Service.
func (l *Ledger) adopt(st State) {
	l.read = &st
	l.addrs = indexAddrs(st.Allocations)
}

// Entries answers, for any Service, its allocations as this term last
// wrote them: a view of the ledger, not a copy.
func (l *Ledger) Entries() Entries { return ledgerEntries{l} }

type ledgerEntries struct{ l *Ledger }

// Of reads each address the Service holds from the one shard whose range
// holds it.
func (e ledgerEntries) Of(service string) []Allocation {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	ips := l.addrs[service]
	if len(ips) == 0 {
		return nil
	}
	ns, name, _ := strings.Cut(service, "/")
	out := make([]Allocation, 0, len(ips))
	for _, ip := range ips {
		allocs := l.shards[ShardFor(l.shards[0].Shard, ip)].Allocations
		i, _ := slices.BinarySearchFunc(allocs, ip, func(a Allocation, ip netip.Addr) int { return a.IP.Compare(ip) })
		for ; i < len(allocs) && allocs[i].IP == ip; i++ {
			if allocs[i].Service.Namespace == ns && allocs[i].Service.Name == name {
				out = append(out, allocs[i])
			}
		}
	}
	return out
}

// Records reports whether the ledger records any address for the Service
// "namespace/name".
func (l *Ledger) Records(service string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.addrs[service]) > 0
}

// ServiceCount is how many Services the ledger records addresses for.
func (l *Ledger) ServiceCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.addrs)
}

// Services returns the keys of the Services the ledger records addresses
// for, in no order.
func (l *Ledger) Services() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Keys(l.addrs))
}

// ForeignWrites returns the writes not made by ipam that Open found.
func (l *Ledger) ForeignWrites() []ForeignWrite { return slices.Clone(l.foreign) }

type liveShard struct {
	Shard
	rv   string
	size int
}

// inherited reports whether s is a shard this term took over from a clean
// release and has not written: it carries another term's epoch.
func (l *Ledger) inherited(s *liveShard) bool { return s.Epoch != l.epoch || s.Term != l.opts.Term }

type snapshot struct {
	state  State
	layout Layout
	rvs    map[string]string
	sizes  map[string]int // Size of each shard's data as stored
	maxNum int
	// listed and parsed are how long the LIST and the parse took.
	listed, parsed time.Duration
	// released is the epoch the head's ReleasedAnnotation names (0: none).
	released uint64
	// foreign are the shards' writes not made by ipam (ForeignWrite).
	foreign []ForeignWrite
}

// read lists the ledger ConfigMaps from the API server (never a cache: the
// ledger is the authority a new term starts from).
func read(ctx context.Context, client kubernetes.Interface, namespace string) (snapshot, error) {
	start := time.Now()
	list, err := client.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelKey + "=true"})
	if err != nil {
		return snapshot{}, fmt.Errorf("list ledger ConfigMaps in %s: %w", namespace, err)
	}
	snap := snapshot{rvs: map[string]string{}, sizes: map[string]int{}, listed: time.Since(start)}
	start = time.Now()
	data := map[string]map[string]string{}
	for _, cm := range list.Items {
		n, ok := ShardNumber(cm.Name)
		if !ok {
			continue
		}
		snap.maxNum = max(snap.maxNum, n)
		data[cm.Name] = cm.Data
		snap.rvs[cm.Name] = cm.ResourceVersion
		snap.sizes[cm.Name] = Size(cm.Data)
		if cm.Name == HeadName {
			snap.released, _ = parseEpoch(cm.Annotations[ReleasedAnnotation]) // anything else: not released
		}
		snap.foreign = append(snap.foreign, foreignWrites(&cm)...)
	}
	snap.state, snap.layout, err = Parse(data)
	snap.parsed = time.Since(start)
	return snap, err
}

// Read returns the ledger's current state from the API server.
func Read(ctx context.Context, client kubernetes.Interface, namespace string) (State, error) {
	snap, err := read(ctx, client, namespace)
	return snap.state, err
}

// Open reads the ledger from the API server and fences it: every shard is
// rewritten (the head alone when the term before released the ledger
// cleanly: Release, handedOver), head first, with compare-and-swap on the
// resourceVersion it was read at, stamped with opts.Term and a fencing epoch
// one higher than any shard carries (FenceEpoch). A writer of an earlier term, whose
// resourceVersions are now stale, can then no longer write; when it reads
// the ledger again it finds a higher epoch and stops (ErrFenced). Before
// writing, Open asks opts.Holds whether the term still holds its lease, and
// returns ErrFenced if not. A corrupt ledger is returned as *CorruptError and
// left untouched. Open is an Opener run to its end with nothing done
// between its attempts' Begin and Fenced.
func Open(ctx context.Context, client kubernetes.Interface, opts Options) (*Ledger, error) {
	o := NewOpener(client, opts)
	for o.Next(ctx) {
	}
	return o.Ledger(), o.Err()
}

// openAttempts bounds how often Open reads the ledger again after another
// writer got in between its read and its fence.
const openAttempts = 10

// An Opener is Open step by step, for a caller with work of its own to do
// while the shards after the head are fenced (ipam's term rebuilds its
// allocator and asks the API server about suspect entries then): the
// caller drives it, as a bufio.Scanner, and the ledger calls nothing of
// the caller's.
//
//	o := ledger.NewOpener(client, opts)
//	for o.Next(ctx) {
//		rebuild(o.Ledger()) // may be dropped: act on nothing yet
//	}
//	l, err := o.Ledger(), o.Err()
//
// Whatever the caller computed from an attempt's Ledger it may act on only
// if that is the Ledger the Opener ends with (Err nil).
type Opener struct {
	client   kubernetes.Interface
	opts     Options
	attempts int
	l        *Ledger // the attempt under way, or the opened ledger
	err      error
	done     bool
}

// NewOpener returns an Opener of the ledger opts names; nothing is read
// before Next.
func NewOpener(client kubernetes.Interface, opts Options) *Opener {
	return &Opener{client: client, opts: opts}
}

// Next waits for the fence of the attempt under way, if any, and when
// another writer got in (Contended) begins the next attempt (Begin): it
// reads the ledger again and fences its head. It reports whether an
// attempt is under way, whose Ledger the caller may rebuild from; false
// means the ledger is open (Ledger) or cannot be (Err).
func (o *Opener) Next(ctx context.Context) bool {
	if o.done {
		return false
	}
	if o.l != nil {
		if o.err = o.l.Fenced(ctx); o.err == nil {
			o.done = true
			return false
		}
		o.l = nil
		if !o.retry() {
			return false
		}
	}
	for {
		if o.l, o.err = Begin(ctx, o.client, o.opts); o.err == nil {
			return true
		}
		if !o.retry() {
			return false
		}
	}
}

// retry counts a failed attempt and reports whether another is due: the
// error is another writer's and attempts are left.
func (o *Opener) retry() bool {
	if !Contended(o.err) {
		o.done = true
		return false
	}
	o.opts.Metrics.write("conflict")
	o.attempts++
	if o.attempts >= openAttempts {
		o.done = true
		return false
	}
	return true
}

// Ledger is the attempt's Ledger while Next answers true, the opened
// ledger once it answers false with Err nil, and nil after an error.
func (o *Opener) Ledger() *Ledger { return o.l }

// Err is why the ledger could not be opened, once Next answered false.
func (o *Opener) Err() error { return o.err }

// Begin is Open up to the head: it reads the ledger, confirms the lease and
// rewrites the head (the write that orders this term against any other that
// read the same ledger), and returns with State and Entries answering
// what it read while the other shards are rewritten in the background. The
// caller may rebuild from it meanwhile, but must act on nothing before
// Fenced returns nil (Commit waits for it too). A head write that lost to
// another writer is retried from the read.
func Begin(ctx context.Context, client kubernetes.Interface, opts Options) (*Ledger, error) {
	if opts.Term == "" {
		return nil, errors.New("ledger: a term is required")
	}
	if opts.ShardLimit <= 0 {
		opts.ShardLimit = DefaultShardLimit
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{client: client, opts: opts, fenced: make(chan struct{})}
	var err error
	defer func() {
		for _, f := range l.foreign {
			opts.Log.Warn("A ledger ConfigMap was written by someone other than ipam; its entries are checked against the Services' statuses",
				"configMap", f.Shard, "fieldManager", f.Manager, "at", f.At)
			if opts.Metrics != nil {
				opts.Metrics.foreign.WithLabelValues(f.Shard).Inc()
			}
		}
	}()
	for attempt := 0; attempt < 10; attempt++ {
		if err = l.fence(ctx); !Contended(err) {
			break
		}
		// Another writer (an older term still finishing, or a rival) wrote
		// between our read and our fence: read again and start over.
		l.opts.Metrics.write("conflict")
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Contended reports whether err is another writer's write that landed
// between a read of the ledger and its fence (a term still finishing, or a
// rival): the answer is to read it again and start over.
func Contended(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }

// Fenced waits until every shard carries this term's epoch, and returns why
// not if a shard could not be rewritten (Contended: another writer got in
// after the read, so open the ledger again).
func (l *Ledger) Fenced(ctx context.Context) error {
	select {
	case <-l.fenced:
		return l.fenceErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Epoch is the fencing epoch this term writes with.
func (l *Ledger) Epoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// Release ends the term's writing and, if every write of it was answered,
// says so on the head (ReleasedAnnotation): the next term then rewrites the
// head alone instead of every shard (handedOver, docs/fencing.md). Call it
// last, when the term has stopped: after Release, Commit returns
// ErrReleased, whatever Release returned. It returns why the head does not
// say so (a write without an answer, the fence unfinished, the head's own
// write failed); the next term then fences every shard, as after a crash.
func (l *Ledger) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return ErrReleased
	}
	l.released = true
	select {
	case <-l.fenced:
		if l.fenceErr != nil {
			return fmt.Errorf("the term's fence failed: %w", l.fenceErr)
		}
	default:
		return errors.New("the term's fence is still under way")
	}
	if l.unanswered.Load() {
		return errors.New("a write of this term failed without an answer and may still land")
	}
	head := l.shards[0]
	cm := l.configMap(head, Encode(head.Shard))
	cm.Annotations = map[string]string{ReleasedAnnotation: strconv.FormatUint(l.epoch, 10)}
	return l.put(ctx, head, cm)
}

// confirm asks opts.Holds whether the term still holds its lease.
func (l *Ledger) confirm(ctx context.Context) error {
	if l.opts.Holds == nil {
		return nil
	}
	held, err := l.opts.Holds(ctx)
	if err != nil {
		return fmt.Errorf("cannot tell whether term %q still holds the lease: %w", l.opts.Term, err)
	}
	if !held {
		l.opts.Metrics.write("fenced")
		return fmt.Errorf("term %q no longer holds the lease: %w", l.opts.Term, ErrFenced)
	}
	return nil
}

// fence is one attempt of Open: read the ledger, confirm the lease, and
// rewrite every shard with this term's epoch (see Open).
func (l *Ledger) fence(ctx context.Context) error {
	snap, err := read(ctx, l.client, l.opts.Namespace)
	if err != nil {
		return err
	}
	// Only now, after the read: a term that won the lease after this
	// answer reads the ledger after it too, so it sees our fence, or our
	// fence fails its compare-and-swap against its own.
	if err := l.confirm(ctx); err != nil {
		return err
	}
	l.foreign = snap.foreign
	epoch, err := FenceEpoch(snap.layout, l.opts.Term)
	if err != nil {
		return &CorruptError{Shard: HeadName, Err: err}
	}
	start := time.Now()
	l.epoch = epoch
	l.maxNum = snap.maxNum
	l.shards = nil
	if len(snap.layout) == 0 {
		return l.fenceNew(ctx, snap, epoch, start)
	}
	shards := make([]*liveShard, len(snap.layout))
	leftovers := false
	for i, s := range snap.layout {
		// Rewrite the shard with only the entries its range covers: this
		// also clears the leftovers of an interrupted split.
		ls := &liveShard{Shard: Shard{Name: s.Name, Epoch: epoch, Term: l.opts.Term, Index: s.Index}, rv: snap.rvs[s.Name]}
		ls.Allocations, ls.Reservations = snap.layout.withinRange(i)
		leftovers = leftovers || len(ls.Allocations) != len(s.Allocations) || len(ls.Reservations) != len(s.Reservations)
		shards[i] = ls
	}
	// After a clean release only the head is rewritten (handedOver); the
	// other shards are kept as stored. Not when a shard holds leftovers to
	// clear, nor when somebody else wrote a shard since: the fence takes it
	// back, so that the write is reported once, not by every term after.
	handover := handedOver(snap.layout, snap.released) && len(snap.foreign) == 0 && !leftovers
	if handover {
		for i, s := range snap.layout[1:] {
			shards[i+1] = &liveShard{Shard: s, rv: snap.rvs[s.Name], size: snap.sizes[s.Name]}
		}
	}
	// The head first: it is what orders two terms that read the same
	// ledger (only one compare-and-swap on it succeeds). The other shards
	// after it, several at once: each is its own compare-and-swap, and a
	// writer of an older term fails on whichever of them it touches next.
	if err := l.update(ctx, shards[0], nil); err != nil {
		return err
	}
	// The rest of the fence writes exactly what was read: the caller may
	// rebuild from it while they are under way (Begin). Only their
	// resourceVersions change, which only a commit reads, after Fenced.
	l.shards = shards
	l.adopt(snap.state)
	if handover {
		l.fenceDone("head", snap, start)
		close(l.fenced)
		return nil
	}
	rest := shards[1:]
	go func() {
		defer close(l.fenced)
		if err := parallel.EachErr(len(rest), fenceWriters, func(i int) error { return l.update(ctx, rest[i], nil) }); err != nil {
			l.fenceErr = err
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.fenceDone("every-shard", snap, start)
	}()
	return nil
}

// fenceNew is fence when there is no ledger yet: it creates the head,
// empty, with this term's epoch.
func (l *Ledger) fenceNew(ctx context.Context, snap snapshot, epoch uint64, start time.Time) error {
	head := &liveShard{Shard: Shard{Name: HeadName, Epoch: epoch, Term: l.opts.Term}}
	if err := l.create(ctx, head); err != nil {
		return err
	}
	l.shards = []*liveShard{head}
	l.measure()
	l.adopt(State{})
	l.opts.Metrics.opened("head", snap.listed, snap.parsed, time.Since(start))
	l.opts.Log.Info("Fenced a new ledger", "term", l.opts.Term, "epoch", epoch)
	close(l.fenced)
	return nil
}

// fenceDone reports a fence of the ledger read in snap, begun at start,
// that rewrote fenced ("head" or "every-shard"): the ledger's size, the
// Open's steps, a log line. The caller owns l.shards (holds l.mu, or the
// fence has not handed them over yet).
func (l *Ledger) fenceDone(fenced string, snap snapshot, start time.Time) {
	l.measure()
	l.opts.Metrics.opened(fenced, snap.listed, snap.parsed, time.Since(start))
	msg := "Fenced the ledger"
	if fenced == "head" {
		msg = "Took over a ledger its last term released cleanly: fenced its head only"
	}
	l.opts.Log.Info(msg, "term", l.opts.Term, "epoch", l.epoch, "previousEpoch", snap.layout.Epoch(),
		"previousTerm", snap.layout[0].Term, "shards", len(l.shards), "read", snap.listed, "parse", snap.parsed, "fence", time.Since(start),
		"allocations", len(snap.state.Allocations), "reservations", len(snap.state.Reservations))
}

// measure exports the size of the ledger as this term last wrote it.
func (l *Ledger) measure() {
	m := l.opts.Metrics
	if m == nil {
		return
	}
	total := 0
	for _, s := range l.shards {
		total += s.size
	}
	allocations, reservations := l.layout().Counts()
	m.bytes.Set(float64(total))
	m.shards.Set(float64(len(l.shards)))
	m.entries.WithLabelValues("allocation").Set(float64(allocations))
	m.entries.WithLabelValues("reservation").Set(float64(reservations))
}

// layout is the shards as this term last wrote them.
func (l *Ledger) layout() Layout {
	layout := make(Layout, len(l.shards))
	for i, s := range l.shards {
		layout[i] = s.Shard
	}
	return layout
}

// configMap is shard s as a ConfigMap with data, s encoded (Encode).
func (l *Ledger) configMap(s *liveShard, data map[string]string) *corev1.ConfigMap {
	s.size = Size(data)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: l.opts.Namespace, ResourceVersion: s.rv,
			Labels: map[string]string{LabelKey: "true", "app.kubernetes.io/managed-by": "ipledger-ipam"},
		},
		Data: data,
	}
}

// create writes s as a new ConfigMap, and records its resourceVersion.
func (l *Ledger) create(ctx context.Context, s *liveShard) error {
	s.rv = ""
	out, err := l.client.CoreV1().ConfigMaps(l.opts.Namespace).Create(ctx, l.configMap(s, Encode(s.Shard)), metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		l.failed(err)
		return fmt.Errorf("create ledger shard %s: %w", s.Name, err)
	}
	l.opts.Metrics.write("ok")
	s.rv = out.ResourceVersion
	return nil
}

// update writes s with compare-and-swap on the resourceVersion it was read
// at; data is s encoded, or nil to encode it here. The answer is asked for
// as metadata only: all the write needs of it is the new resourceVersion,
// and decoding a shard of up to 480 KiB back was a copy of everything just
// sent.
func (l *Ledger) update(ctx context.Context, s *liveShard, data map[string]string) error {
	if data == nil {
		data = Encode(s.Shard)
	}
	return l.put(ctx, s, l.configMap(s, data))
}

// put writes cm, shard s as a ConfigMap, with compare-and-swap on s's
// resourceVersion, and records the new one.
func (l *Ledger) put(ctx context.Context, s *liveShard, cm *corev1.ConfigMap) error {
	raw, err := l.client.CoreV1().RESTClient().Put().Namespace(l.opts.Namespace).Resource("configmaps").Name(s.Name).
		Param("fieldManager", FieldManager).SetHeader("Accept", metaonly.Accept).Body(cm).Do(ctx).Raw()
	if err != nil {
		l.failed(err)
		return fmt.Errorf("update ledger shard %s: %w", s.Name, err)
	}
	out, err := metaonly.Parse(raw)
	if err != nil {
		l.opts.Metrics.write("error")
		return fmt.Errorf("update ledger shard %s: %w", s.Name, err)
	}
	l.opts.Metrics.write("ok")
	s.rv = out.ResourceVersion
	return nil
}

// failed counts a write that failed, and remembers one that may still land.
func (l *Ledger) failed(err error) {
	l.opts.Metrics.write(resultOf(err))
	if !refused(err) {
		l.unanswered.Store(true)
	}
}

// refused reports whether err is the API server's answer that it did not
// make the write (a conflict, a denial, an invalid object, too many
// requests). A write that failed any other way — the connection broke, it
// timed out, the server failed inside — may have been made, or be made
// later.
func refused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout
}

// resultOf is the writes metric's result for a failed write.
func resultOf(err error) string {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return "conflict"
	}
	return "error"
}

// State returns the ledger as this term last wrote it, assembled from its
// shards at each call (an operator's reservation) but the first after a
// read (a term start: the read's own, ledger.read): keeping it assembled
// beside the shards was a second copy of every entry, rebuilt and sorted at
// every commit.
func (l *Ledger) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.read; st != nil {
		l.read = nil
		return *st
	}
	return l.layout().State()
}

// Reservation returns the reservation of ip as this term last wrote it,
// read from the one shard whose range holds ip (State would assemble and
// sort every entry of the ledger to answer it).
func (l *Ledger) Reservation(ip netip.Addr) (Reservation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.shards) == 0 {
		return Reservation{}, false
	}
	for _, r := range l.shards[ShardFor(l.shards[0].Shard, ip)].Reservations {
		if r.IP == ip {
			return r, true
		}
	}
	return Reservation{}, false
}

// Change is a batch of edits committed together.
type Change struct {
	// Allocate records allocations (replacing one of the same IP and Service).
	Allocate []Allocation
	// Release removes allocations, matched by IP and Service namespace/name.
	Release []Allocation
	// Reserve records reservations (replacing one of the same IP).
	Reserve []Reservation
	// Unreserve removes the reservations of these IPs.
	Unreserve []netip.Addr
}

// Empty reports whether the change edits nothing.
func (c Change) Empty() bool {
	return len(c.Allocate)+len(c.Release)+len(c.Reserve)+len(c.Unreserve) == 0
}

// Commit writes a batch of changes: each affected shard in one
// compare-and-swap write, stamped with this term's epoch. It returns ErrFenced
// (wrapped) when a later term owns the ledger, ErrStaleWrite when the ledger
// must be opened again. After any other error some shards may
// have been written and others not; the Ledger re-reads the API so that State
// says what is really committed, and the caller decides again from it.
// Commit makes one attempt and retries nothing: a conflict means the shard
// changed since this term wrote it (a write outside the fencing protocol,
// or a write whose answer was lost), and the change was decided on the
// shard as it was; the caller's retry policy decides (ipam's term opens the
// ledger again, which checks foreign writes, and decides again).
func (l *Ledger) Commit(ctx context.Context, ch Change) error {
	if ch.Empty() {
		return nil
	}
	if err := l.Fenced(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return ErrReleased
	}
	// Whatever happens, the shards may change (a failure re-reads them):
	// the State read last is no longer what State must answer.
	defer func() { l.read = nil }()
	err := l.commit(ctx, ch)
	if err == nil {
		l.addrs.apply(ch)
		return nil
	}
	if errors.Is(err, ErrFenced) || ctx.Err() != nil {
		return err
	}
	if rerr := l.reload(ctx); rerr != nil {
		return fmt.Errorf("%w (and re-reading the ledger failed: %w)", err, rerr)
	}
	return err
}

// reload re-reads the ledger after a failed write. Every listed shard must
// still carry this term's epoch and term, or be as this term took it over
// from a clean release: a higher epoch means a later term
// fenced the ledger (ErrFenced, unless this term still holds the lease, as
// when a backup of a longer history was restored); any other change was made
// outside the fencing protocol and the ledger must be fenced anew
// (ErrStaleWrite).
func (l *Ledger) reload(ctx context.Context) error {
	snap, err := read(ctx, l.client, l.opts.Namespace)
	if err != nil {
		return err
	}
	l.maxNum = max(l.maxNum, snap.maxNum)
	unchanged := map[string]bool{}
	for _, s := range l.shards {
		if l.inherited(s) && snap.rvs[s.Name] == s.rv {
			unchanged[s.Name] = true
		}
	}
	switch v, s := ownershipOf(snap.layout, l.epoch, l.opts.Term, unchanged); v {
	case overtaken:
		if l.opts.Holds != nil {
			held, err := l.opts.Holds(ctx)
			if err != nil {
				return fmt.Errorf("shard %s carries epoch %d, above ours %d, and whether term %q still holds the lease is unknown: %w",
					s.Name, s.Epoch, l.epoch, l.opts.Term, err)
			}
			if held {
				return fmt.Errorf("shard %s carries epoch %d (term %q), above ours %d, yet term %q still holds the lease: %w",
					s.Name, s.Epoch, s.Term, l.epoch, l.opts.Term, ErrStaleWrite)
			}
		}
		l.opts.Metrics.write("fenced")
		return fmt.Errorf("shard %s was fenced at epoch %d by term %q, ours is %d (term %q): %w", s.Name, s.Epoch, s.Term, l.epoch, l.opts.Term, ErrFenced)
	case rewritten:
		return fmt.Errorf("shard %s carries epoch %d (term %q), ours is %d (term %q): %w", s.Name, s.Epoch, s.Term, l.epoch, l.opts.Term, ErrStaleWrite)
	}
	shards := make([]*liveShard, 0, len(snap.layout))
	for _, s := range snap.layout {
		shards = append(shards, &liveShard{Shard: s, rv: snap.rvs[s.Name], size: snap.sizes[s.Name]})
	}
	l.shards = shards
	l.measure()
	l.adopt(snap.state)
	return nil
}

// commit writes ch as layOutCommit lays it out: the shards a split cut off
// are created first, then the shards ch touched are updated, the head first
// (it publishes the created shards), each with compare-and-swap. The
// in-memory shards follow each write that succeeds, so that they stay
// equal to what is stored.
func (l *Ledger) commit(ctx context.Context, ch Change) error {
	p := layOutCommit(l.layout(), ch, l.epoch, l.opts.Term, l.opts.ShardLimit, l.maxNum, &l.lines)
	l.maxNum = p.maxNum
	created, err := l.createAll(ctx, &p)
	if err != nil {
		return err
	}
	for k := range p.writes {
		w := &p.writes[k]
		ls := &liveShard{Shard: w.shard, rv: l.shards[w.pos].rv}
		data := w.data
		w.data = nil // garbage once sent
		if err := l.update(ctx, ls, data); err != nil {
			return err
		}
		l.shards[w.pos] = ls
	}
	if p.index != nil {
		l.shards = relayout(l.shards, created, p.index)
	}
	l.measure()
	return nil
}

// createAll creates the shards of p.creates. A name an orphan holds (a
// stale leader's create) is replaced, up to a few times, by the number after
// the highest known, which is above every name they lay out (rename).
func (l *Ledger) createAll(ctx context.Context, p *commitWrites) ([]*liveShard, error) {
	created := make([]*liveShard, 0, len(p.creates))
	for k := range p.creates {
		for tries := 0; ; tries++ {
			ls := &liveShard{Shard: p.creates[k]}
			err := l.create(ctx, ls)
			if err == nil {
				created = append(created, ls)
				break
			}
			if !apierrors.IsAlreadyExists(err) || tries > 5 {
				return nil, err
			}
			// An orphan holds the name: take the next one.
			l.maxNum++
			p.rename(k, ShardName(l.maxNum))
		}
	}
	return created, nil
}

// relayout returns the shards in the order index lists them, after the
// head: those of shards and those just created, found by name.
func relayout(shards, created []*liveShard, index []IndexEntry) []*liveShard {
	byName := map[string]*liveShard{}
	for _, s := range shards {
		byName[s.Name] = s
	}
	for _, s := range created {
		byName[s.Name] = s
	}
	out := []*liveShard{shards[0]}
	for _, e := range index {
		out = append(out, byName[e.Name])
	}
	return out
}
