package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ErrFenced means a newer term has rewritten the ledger: this writer's term is
// over and it must not write again.
var ErrFenced = errors.New("ledger was fenced by a newer lease term")

// CompareTerms orders two lease term IDs ("<identity>/<leaseTransitions>/<acquireTime>"):
// by lease transitions, then acquire time. ok is false when either does not
// parse.
func CompareTerms(a, b string) (c int, ok bool) {
	ta, okA := parseTerm(a)
	tb, okB := parseTerm(b)
	if !okA || !okB {
		return 0, false
	}
	if ta.transitions != tb.transitions {
		if ta.transitions < tb.transitions {
			return -1, true
		}
		return 1, true
	}
	return ta.acquired.Compare(tb.acquired), true
}

type termID struct {
	transitions int64
	acquired    time.Time
}

func parseTerm(s string) (termID, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return termID{}, false
	}
	j := strings.LastIndexByte(s[:i], '/')
	if j < 0 {
		return termID{}, false
	}
	n, err := strconv.ParseInt(s[j+1:i], 10, 64)
	if err != nil {
		return termID{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s[i+1:])
	if err != nil {
		return termID{}, false
	}
	return termID{transitions: n, acquired: t}, true
}

// ErrStaleWrite means an older term wrote the ledger after this term fenced
// it (it was paused before its own fence). The ledger is still this term's to
// write: open it again with Options.Reopen, which fences it anew.
var ErrStaleWrite = errors.New("an older lease term wrote the ledger after this term fenced it")

// CorruptError is a ledger that cannot be read. Allocation stops until a
// person repairs or removes the named shard; ipam never overwrites it.
type CorruptError struct {
	// Shard is the ConfigMap at fault.
	Shard string
	Err   error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("ledger ConfigMap %s cannot be read, allocation is stopped until it is repaired: %v", e.Shard, e.Err)
}

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
	for _, e := range head.Index {
		data, ok := configMaps[e.Name]
		if !ok {
			return State{}, nil, &CorruptError{Shard: e.Name, Err: fmt.Errorf("listed by %s but missing", HeadName)}
		}
		s, err := Decode(e.Name, data)
		if err != nil {
			return State{}, nil, &CorruptError{Shard: e.Name, Err: err}
		}
		shards[e.Name] = s
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
	bytes   prometheus.Gauge
	shards  prometheus.Gauge
	entries *prometheus.GaugeVec
}

// NewMetrics registers the ledger metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_ipam_ledger_writes_total",
			Help: "Writes of ledger ConfigMaps by result (ok, conflict, fenced, error).",
		}, []string{"result"}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_ledger_bytes",
			Help: "Encoded size of the ledger, all shards.",
		}),
		shards: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_ledger_shards",
			Help: "Ledger ConfigMaps in use.",
		}),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_ipam_ledger_entries",
			Help: "Entries in the ledger by kind (allocation, reservation).",
		}, []string{"kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.writes, m.bytes, m.shards, m.entries)
	}
	return m
}

func (m *Metrics) write(result string) {
	if m != nil {
		m.writes.WithLabelValues(result).Inc()
	}
}

// Options configure a leader's Ledger.
type Options struct {
	// Namespace holds the ledger ConfigMaps.
	Namespace string
	// Term is the writer's lease term ID; every write is stamped with it.
	Term string
	// ShardLimit is the encoded size above which a shard is split;
	// 0 means DefaultShardLimit.
	ShardLimit int
	Metrics    *Metrics
	Log        *slog.Logger
	// Reopen is set when the same term opens the ledger again after a
	// failed write: a shard stamped by any other term that is not provably
	// older then means this term was fenced.
	Reopen bool
}

// Ledger is one term's writer. Build it with Open at the start of a term and
// drop it when the term ends.
type Ledger struct {
	client kubernetes.Interface
	opts   Options

	mu     sync.Mutex
	shards []*liveShard // layout order; shards[0] is the head
	maxNum int          // highest shard number of any ledger ConfigMap seen
	state  State
}

type liveShard struct {
	Shard
	rv   string
	size int
}

type snapshot struct {
	state  State
	layout Layout
	rvs    map[string]string
	maxNum int
}

// read lists the ledger ConfigMaps from the API server (never a cache: the
// ledger is the authority a new term starts from).
func read(ctx context.Context, client kubernetes.Interface, namespace string) (snapshot, error) {
	list, err := client.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelKey + "=true"})
	if err != nil {
		return snapshot{}, fmt.Errorf("list ledger ConfigMaps in %s: %w", namespace, err)
	}
	snap := snapshot{rvs: map[string]string{}}
	data := map[string]map[string]string{}
	for _, cm := range list.Items {
		n, ok := ShardNumber(cm.Name)
		if !ok {
			continue
		}
		snap.maxNum = max(snap.maxNum, n)
		data[cm.Name] = cm.Data
		snap.rvs[cm.Name] = cm.ResourceVersion
	}
	snap.state, snap.layout, err = Parse(data)
	return snap, err
}

// Read returns the ledger's current state from the API server.
func Read(ctx context.Context, client kubernetes.Interface, namespace string) (State, error) {
	snap, err := read(ctx, client, namespace)
	return snap.state, err
}

// Open reads the ledger from the API server and fences it: every shard is
// rewritten stamped with opts.Term, so that a writer of an older term, whose
// resourceVersions are now stale, can no longer write. A corrupt ledger is
// returned as *CorruptError and left untouched.
func Open(ctx context.Context, client kubernetes.Interface, opts Options) (*Ledger, error) {
	if opts.Term == "" {
		return nil, errors.New("ledger: a term is required")
	}
	if opts.ShardLimit <= 0 {
		opts.ShardLimit = DefaultShardLimit
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{client: client, opts: opts}
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		if err = l.fence(ctx); err == nil || !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
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

func (l *Ledger) fence(ctx context.Context) error {
	snap, err := read(ctx, l.client, l.opts.Namespace)
	if err != nil {
		return err
	}
	l.maxNum = snap.maxNum
	l.shards = nil
	if len(snap.layout) == 0 {
		head := &liveShard{Shard: Shard{Name: HeadName, Term: l.opts.Term}}
		if err := l.create(ctx, head); err != nil {
			return err
		}
		l.shards = []*liveShard{head}
		l.setState(snap.state)
		return nil
	}
	for _, s := range snap.layout {
		c, ok := CompareTerms(s.Term, l.opts.Term)
		if (ok && c > 0) || (!ok && l.opts.Reopen && s.Term != l.opts.Term) {
			l.opts.Metrics.write("fenced")
			return fmt.Errorf("shard %s was written by term %q, newer than ours %q: %w", s.Name, s.Term, l.opts.Term, ErrFenced)
		}
	}
	head := snap.layout[0]
	for i, s := range snap.layout {
		// Rewrite the shard with only the entries its range covers: this
		// also clears the leftovers of an interrupted split.
		lo, hi := bounds(head, i)
		ls := &liveShard{Shard: Shard{Name: s.Name, Term: l.opts.Term, Index: s.Index}, rv: snap.rvs[s.Name]}
		for _, a := range s.Allocations {
			if inRange(a.IP, lo, hi) {
				ls.Allocations = append(ls.Allocations, a)
			}
		}
		for _, r := range s.Reservations {
			if inRange(r.IP, lo, hi) {
				ls.Reservations = append(ls.Reservations, r)
			}
		}
		if err := l.update(ctx, ls); err != nil {
			return err
		}
		l.shards = append(l.shards, ls)
	}
	l.setState(snap.state)
	l.opts.Log.Info("Fenced the ledger", "term", l.opts.Term, "shards", len(l.shards),
		"allocations", len(snap.state.Allocations), "reservations", len(snap.state.Reservations))
	return nil
}

func (l *Ledger) setState(st State) {
	l.state = st
	if m := l.opts.Metrics; m != nil {
		total := 0
		for _, s := range l.shards {
			total += s.size
		}
		m.bytes.Set(float64(total))
		m.shards.Set(float64(len(l.shards)))
		m.entries.WithLabelValues("allocation").Set(float64(len(st.Allocations)))
		m.entries.WithLabelValues("reservation").Set(float64(len(st.Reservations)))
	}
}

func (l *Ledger) configMap(s *liveShard) *corev1.ConfigMap {
	data := Encode(s.Shard)
	s.size = Size(data)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: l.opts.Namespace, ResourceVersion: s.rv,
			Labels: map[string]string{LabelKey: "true", "app.kubernetes.io/managed-by": "ipledger-ipam"},
		},
		Data: data,
	}
}

func (l *Ledger) create(ctx context.Context, s *liveShard) error {
	s.rv = ""
	out, err := l.client.CoreV1().ConfigMaps(l.opts.Namespace).Create(ctx, l.configMap(s), metav1.CreateOptions{})
	if err != nil {
		l.opts.Metrics.write(resultOf(err))
		return fmt.Errorf("create ledger shard %s: %w", s.Name, err)
	}
	l.opts.Metrics.write("ok")
	s.rv = out.ResourceVersion
	return nil
}

// update writes s with compare-and-swap on the resourceVersion it was read at.
func (l *Ledger) update(ctx context.Context, s *liveShard) error {
	out, err := l.client.CoreV1().ConfigMaps(l.opts.Namespace).Update(ctx, l.configMap(s), metav1.UpdateOptions{})
	if err != nil {
		l.opts.Metrics.write(resultOf(err))
		return fmt.Errorf("update ledger shard %s: %w", s.Name, err)
	}
	l.opts.Metrics.write("ok")
	s.rv = out.ResourceVersion
	return nil
}

func resultOf(err error) string {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return "conflict"
	}
	return "error"
}

// State returns the ledger as this term last wrote it. The slices are shared:
// do not modify them.
func (l *Ledger) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
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
// compare-and-swap write, stamped with this term. It returns ErrFenced (wrapped)
// when a newer term owns the ledger. After any other error some shards may
// have been written and others not; the Ledger re-reads the API so that State
// says what is really committed, and the caller decides again from it.
func (l *Ledger) Commit(ctx context.Context, ch Change) error {
	if ch.Empty() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = l.commit(ctx, ch); err == nil {
			return nil
		}
		if errors.Is(err, ErrFenced) || ctx.Err() != nil {
			return err
		}
		if rerr := l.reload(ctx); rerr != nil {
			return fmt.Errorf("%w (and re-reading the ledger failed: %w)", err, rerr)
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// reload re-reads the ledger after a failed write. Every listed shard must
// still carry this term; any other term means we were fenced.
func (l *Ledger) reload(ctx context.Context) error {
	snap, err := read(ctx, l.client, l.opts.Namespace)
	if err != nil {
		return err
	}
	l.maxNum = max(l.maxNum, snap.maxNum)
	shards := make([]*liveShard, 0, len(snap.layout))
	for _, s := range snap.layout {
		if s.Term != l.opts.Term {
			if c, ok := CompareTerms(s.Term, l.opts.Term); ok && c < 0 {
				// An older term, paused before its own fence, wrote after
				// ours: fence again (Open with Reopen) rather than give up.
				return fmt.Errorf("shard %s was written by the older term %q after this term %q fenced it: %w", s.Name, s.Term, l.opts.Term, ErrStaleWrite)
			}
			l.opts.Metrics.write("fenced")
			return fmt.Errorf("shard %s was written by term %q, ours is %q: %w", s.Name, s.Term, l.opts.Term, ErrFenced)
		}
		shards = append(shards, &liveShard{Shard: s, rv: snap.rvs[s.Name], size: Size(Encode(s))})
	}
	if len(shards) == 0 {
		return fmt.Errorf("ledger head %s disappeared: %w", HeadName, ErrFenced)
	}
	l.shards = shards
	l.setState(snap.state)
	return nil
}

func (l *Ledger) commit(ctx context.Context, ch Change) error {
	head := l.shards[0]
	edits := map[int]*Shard{}
	edit := func(ip netip.Addr) *Shard {
		i := ShardFor(head.Shard, ip)
		if s, ok := edits[i]; ok {
			return s
		}
		cur := l.shards[i].Shard
		s := &Shard{Name: cur.Name, Term: l.opts.Term, Index: cur.Index,
			Allocations: slices.Clone(cur.Allocations), Reservations: slices.Clone(cur.Reservations)}
		edits[i] = s
		return s
	}
	for _, a := range ch.Release {
		s := edit(a.IP)
		s.Allocations = slices.DeleteFunc(s.Allocations, func(x Allocation) bool {
			return x.IP == a.IP && x.Service.Namespace == a.Service.Namespace && x.Service.Name == a.Service.Name
		})
	}
	for _, ip := range ch.Unreserve {
		s := edit(ip)
		s.Reservations = slices.DeleteFunc(s.Reservations, func(x Reservation) bool { return x.IP == ip })
	}
	for _, a := range ch.Allocate {
		s := edit(a.IP)
		s.Allocations = slices.DeleteFunc(s.Allocations, func(x Allocation) bool {
			return x.IP == a.IP && x.Service.Namespace == a.Service.Namespace && x.Service.Name == a.Service.Name
		})
		s.Allocations = append(s.Allocations, a)
	}
	for _, r := range ch.Reserve {
		s := edit(r.IP)
		s.Reservations = slices.DeleteFunc(s.Reservations, func(x Reservation) bool { return x.IP == r.IP })
		s.Reservations = append(s.Reservations, r)
	}

	positions := make([]int, 0, len(edits))
	for i := range edits {
		positions = append(positions, i)
	}
	sort.Ints(positions)

	// Split what outgrew the limit. New shards are created first; they
	// count only once the head lists them, and the old shard is trimmed
	// after that, so a reader never sees an entry vanish.
	newIndex := slices.Clone(head.Index)
	var created []*liveShard
	for _, i := range positions {
		first, rest, from := Split(*edits[i], l.opts.ShardLimit, func() string {
			l.maxNum++
			return ShardName(l.maxNum)
		})
		*edits[i] = first
		for k, r := range rest {
			ls := &liveShard{Shard: r}
			ls.Term = l.opts.Term
			for tries := 0; ; tries++ {
				err := l.create(ctx, ls)
				if err == nil {
					break
				}
				if !apierrors.IsAlreadyExists(err) || tries > 5 {
					return err
				}
				// An orphan holds the name: take the next one.
				l.maxNum++
				ls.Name = ShardName(l.maxNum)
			}
			created = append(created, ls)
			newIndex = append(newIndex, IndexEntry{Name: ls.Name, From: from[k]})
		}
	}
	slices.SortFunc(newIndex, func(a, b IndexEntry) int { return a.From.Compare(b.From) })
	indexChanged := len(newIndex) != len(head.Index)
	if indexChanged {
		if _, ok := edits[0]; !ok {
			edits[0] = &Shard{Name: head.Name, Term: l.opts.Term, Allocations: head.Allocations, Reservations: head.Reservations}
			positions = append([]int{0}, positions...)
		}
		edits[0].Index = newIndex
	}

	// Write: the head first (it publishes new shards), then the others.
	for _, i := range positions {
		ls := &liveShard{Shard: *edits[i], rv: l.shards[i].rv}
		if err := l.update(ctx, ls); err != nil {
			return err
		}
		l.shards[i] = ls // keep the in-memory copy equal to what is stored
	}
	if indexChanged {
		byName := map[string]*liveShard{}
		for _, s := range l.shards {
			byName[s.Name] = s
		}
		for _, s := range created {
			byName[s.Name] = s
		}
		shards := []*liveShard{l.shards[0]}
		for _, e := range newIndex {
			shards = append(shards, byName[e.Name])
		}
		l.shards = shards
	}
	l.setState(l.assemble())
	return nil
}

func (l *Ledger) assemble() State {
	var st State
	for _, s := range l.shards {
		st.Allocations = append(st.Allocations, s.Allocations...)
		st.Reservations = append(st.Reservations, s.Reservations...)
	}
	slices.SortFunc(st.Allocations, CompareAllocations)
	slices.SortFunc(st.Reservations, compareReservations)
	return st
}
