package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// trimEvery is how often the writer applies retention: dropping an old
// entry rewrites its segment, so it is done at a term start and then now
// and then, not at every write.
const trimEvery = 10 * time.Minute

// retryDelay is the wait before a failed history write is tried again.
const retryDelay = 2 * time.Second

// DefaultWriteEvery is how often, at most, a writer writes ipam's own
// decisions (Options.WriteEvery): every write rewrites the head (up to
// HeadLimit), and one a pass, under a steady stream of new Services, added
// to the API server's load what ipam's status and ledger writes wait
// behind (BENCHMARKS.md, the steady state with and without the history).
// A change a person made, a ledger opened and a drain are written at once.
const DefaultWriteEvery = time.Second

// Options configure a term's Writer.
type Options struct {
	// Namespace is ipam's, where the history ConfigMaps are.
	Namespace string
	// Term is the lease term, written for people.
	Term      string
	Retention Retention
	Log       *slog.Logger
	// Metrics count the writer's failures and export what it has not
	// written (nil: none).
	Metrics *Metrics
	// Now is the clock retention is applied by (nil: time.Now); tests
	// move it forward instead of waiting.
	Now func() time.Time
	// WriteEvery is the least time between two writes of ipam's own
	// changes (0: DefaultWriteEvery); what comes meanwhile is written
	// together. A crash in between loses nothing: the next term records
	// what the history does not say (Reconcile).
	WriteEvery time.Duration
	// WaitForBegin holds every read and write until Begin: the term hands
	// the writer its changes from the start, and lets it read the history
	// and compare it with the ledger once its first passes are done, off
	// the restart's memory peak (BENCHMARKS.md, Address history).
	WaitForBegin bool
}

// failWarnEvery is how often a writer that keeps failing says so again:
// it tries every retryDelay, and one line per try would bury the log.
const failWarnEvery = time.Minute

// item is one thing the term tells its writer: a ledger (re)opened, or a
// change committed.
type item struct {
	opened   *ledger.State
	epoch    uint64
	restored bool
	change   ledger.Change
	at       time.Time
	by       string
}

// Writer writes one term's history, off the allocation loop: the term
// hands it each committed change (Committed) and each ledger it opens
// (Opened), and it writes them in the order given. Only a term's writer
// writes: every write is a compare-and-swap, and the head carries the
// ledger epoch of its term; a writer that finds a higher epoch on the head
// stops (fenced, as the ledger is: docs/fencing.md).
type Writer struct {
	client kubernetes.Interface
	opts   Options

	mu    sync.Mutex
	queue []item
	busy  bool // an item taken from the queue is not yet written
	// taken counts the items taken from the queue and not yet written
	// (their entries are in pending): with the queue, what is unwritten.
	taken int
	wake  chan struct{}
	idle  chan struct{} // closed and replaced when the queue is written
	// begun is closed by Begin (at Start without WaitForBegin).
	begun     chan struct{}
	beginOnce sync.Once
	// draining: Drain waits, so the writer no longer paces its writes.
	draining int

	// The loop's own.
	epoch      uint64
	fence      bool // the head must be written with epoch
	st         *stored
	holders    Holders
	pending    []Entry
	fenced     bool
	lastTrim   time.Time
	lastWrite  time.Time
	nextNumber uint64
	// failures since the last write that succeeded, and when the writer
	// last logged one.
	failures int
	lastWarn time.Time
}

// Start starts a term's writer; it stops when ctx ends.
func Start(ctx context.Context, client kubernetes.Interface, opts Options) *Writer {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.WriteEvery == 0 {
		opts.WriteEvery = DefaultWriteEvery
	}
	w := &Writer{client: client, opts: opts, wake: make(chan struct{}, 1), idle: make(chan struct{}), begun: make(chan struct{})}
	if !opts.WaitForBegin {
		w.Begin()
	}
	opts.Metrics.own(w)
	go w.run(ctx)
	return w
}

// Begin lets a writer started with WaitForBegin read the history and
// write. It may be called any number of times, from any goroutine.
func (w *Writer) Begin() {
	if w != nil {
		w.beginOnce.Do(func() { close(w.begun) })
	}
}

func (w *Writer) push(it item) {
	if w == nil {
		return // a worker built without a term (tests)
	}
	w.mu.Lock()
	w.queue = append(w.queue, it)
	w.opts.Metrics.setUnwritten(w, len(w.queue)+w.taken)
	w.mu.Unlock()
	w.poke()
}

// poke wakes the writer's loop.
func (w *Writer) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Opened tells the writer that the term read the ledger as st and fenced
// it at epoch; restored says somebody else wrote it since ipam last did
// (ledger.Ledger.ForeignWrites). The writer records what changed that no
// entry says (Reconcile) before the term's later changes.
func (w *Writer) Opened(st ledger.State, epoch uint64, restored bool) {
	// Dated now, not when the writer gets to it (after a load of the
	// history): the term's changes after it are later.
	w.push(item{opened: &st, epoch: epoch, restored: restored, at: time.Now()})
}

// Committed tells the writer of a change the ledger committed at at, by
// by (IPAM, or the caller of the gRPC call).
func (w *Writer) Committed(ch ledger.Change, at time.Time, by string) {
	w.push(item{change: ch, at: at, by: by})
}

// Drain waits until everything told so far is written, the writer is
// fenced, or ctx ends. A writer not begun (WaitForBegin) writes nothing:
// call Begin first.
func (w *Writer) Drain(ctx context.Context) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	w.draining++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.draining--
		w.mu.Unlock()
	}()
	w.poke()
	for {
		w.mu.Lock()
		done := len(w.queue) == 0 && !w.busy
		idle := w.idle
		w.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (w *Writer) run(ctx context.Context) {
	defer w.opts.Metrics.forget(w)
	select {
	case <-ctx.Done():
		return
	case <-w.begun:
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		for {
			if !w.pace(ctx) {
				return
			}
			w.mu.Lock()
			items := w.queue
			w.queue = nil
			// Taken items unwritten (a write that failed) are tried
			// again even when they left no entries: the head must still
			// be written with the term's epoch.
			w.busy = len(items) > 0 || len(w.pending) > 0 || w.taken > 0
			w.mu.Unlock()
			if !w.busy {
				break
			}
			err := w.handle(ctx, items)
			w.mu.Lock()
			w.opts.Metrics.setUnwritten(w, len(w.queue)+w.taken)
			w.mu.Unlock()
			if err == nil {
				w.lastWrite = time.Now()
				w.recovered()
			} else {
				if ctx.Err() != nil {
					return
				}
				w.failed(err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(retryDelay):
				}
			}
		}
		w.mu.Lock()
		close(w.idle)
		w.idle = make(chan struct{})
		w.mu.Unlock()
	}
}

// pace waits until the writer may write again (nextWrite), and reports
// false when ctx ends first. A push may end the wait (urgent), so each
// wake decides again.
func (w *Writer) pace(ctx context.Context) bool {
	for {
		w.mu.Lock()
		var wait time.Duration
		if len(w.queue) > 0 { // nothing queued: nothing to hold back
			wait = nextWrite(w.lastWrite, time.Now(), w.opts.WriteEvery, w.urgent())
		}
		w.mu.Unlock()
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		case <-w.wake:
			t.Stop()
		}
	}
}

// nextWrite is how long a writer that last wrote at last waits, at now,
// before its next write: until every has passed since, unless urgent.
func nextWrite(last, now time.Time, every time.Duration, urgent bool) time.Duration {
	if urgent || last.IsZero() {
		return 0
	}
	return last.Add(every).Sub(now)
}

// urgent reports whether what waits must be written without pacing: a
// Drain waits, a ledger was opened, a person made a change, or a write
// failed and is tried again (failures wait retryDelay instead). The
// caller holds w.mu.
func (w *Writer) urgent() bool {
	if w.draining > 0 || w.taken > 0 || len(w.pending) > 0 {
		return true
	}
	return slices.ContainsFunc(w.queue, func(it item) bool { return it.opened != nil || it.by != IPAM })
}

// handle turns items into entries and writes them. Items it could not use
// yet (the history is not read) are put back in front of the queue.
func (w *Writer) handle(ctx context.Context, items []item) error {
	for i, it := range items {
		if err := w.decide(ctx, it); err != nil {
			w.requeue(items[i:])
			return err
		}
		w.mu.Lock()
		w.taken++
		w.mu.Unlock()
	}
	if w.fenced {
		w.pending = nil
		w.written()
		return nil
	}
	err := w.flush(ctx)
	if err == nil {
		w.written()
	}
	return err
}

// written says every item taken is written (or, fenced, never will be by
// this writer).
func (w *Writer) written() {
	w.mu.Lock()
	w.taken = 0
	w.mu.Unlock()
}

func (w *Writer) requeue(items []item) {
	w.mu.Lock()
	w.queue = append(items, w.queue...)
	w.mu.Unlock()
}

// failed counts a failed attempt and says so: at the first failure, and
// then once every failWarnEvery while the writer keeps failing. The log
// names the ConfigMap the API server refused, where one was written.
func (w *Writer) failed(err error) {
	w.opts.Metrics.failed()
	w.failures++
	now := time.Now()
	if w.failures > 1 && now.Sub(w.lastWarn) < failWarnEvery {
		return
	}
	w.lastWarn = now
	w.mu.Lock()
	unwritten := len(w.queue) + w.taken
	w.mu.Unlock()
	args := []any{"namespace", w.opts.Namespace}
	var ce *configMapError
	if errors.As(err, &ce) {
		args = append(args, "configMap", ce.name)
	}
	args = append(args, "err", err, "unwrittenChanges", unwritten, "failures", w.failures, "retryIn", retryDelay)
	w.opts.Log.Warn("Cannot write the address history; allocation goes on and the writer tries again", args...)
}

// recovered says, after failures, that the history is written again.
func (w *Writer) recovered() {
	if w.failures == 0 {
		return
	}
	w.opts.Log.Info("The address history is written again", "namespace", w.opts.Namespace, "failures", w.failures)
	w.failures = 0
}

// configMapError is an API error about one history ConfigMap (name; a
// pattern for a LIST).
type configMapError struct {
	op, name string
	err      error
}

func (e *configMapError) Error() string {
	return fmt.Sprintf("%s history ConfigMap %s: %v", e.op, e.name, e.err)
}

func (e *configMapError) Unwrap() error { return e.err }

// decide turns one item into entries (w.pending).
func (w *Writer) decide(ctx context.Context, it item) error {
	if it.opened == nil {
		w.pending = append(w.pending, w.holders.Changes(it.change, it.at, it.by)...)
		return nil
	}
	if it.epoch > w.epoch {
		w.epoch, w.fence = it.epoch, true
	}
	said := w.holders
	if w.st == nil {
		var err error
		if said, err = w.load(ctx); err != nil {
			return err
		}
	}
	how := HowRecovered
	if it.restored {
		how = HowRestored
	}
	found := Reconcile(said, *it.opened, it.at, IPAM, how)
	if len(found) > 0 {
		w.opts.Log.Info("Recorded changes of address holders that no history entry said", "entries", len(found), "how", how)
	}
	w.pending = append(w.pending, found...)
	w.holders = FromState(*it.opened)
	return nil
}

// load reads the stored history (readHeld: only the head's entries are
// kept decoded) and returns the holders it says.
func (w *Writer) load(ctx context.Context) (Holders, error) {
	st, said, err := readHeld(ctx, w.client, w.opts.Namespace)
	if err != nil {
		return nil, err
	}
	if st.epoch > w.epoch {
		w.fenced = true
		w.opts.Log.Info("The address history carries a newer term's epoch; this term writes none", "epoch", st.epoch, "ours", w.epoch)
	}
	w.st, w.fence = &st, true
	w.opts.Metrics.setSize(w, st)
	w.nextNumber = 1
	for _, s := range st.segments {
		w.bumpNumber(s.name)
	}
	for _, name := range st.orphans {
		w.bumpNumber(name)
	}
	return said, nil
}

func (w *Writer) bumpNumber(name string) {
	if n, ok := segmentNumber(name); ok && n >= w.nextNumber {
		w.nextNumber = n + 1
	}
}

// flush writes w.pending: retention applied to the sealed segments it
// changed, the head's entries sealed into a new segment when they grow past
// SegmentLimit, then the head, last, with compare-and-swap. After a write
// that fails, the history is read again before the next try.
func (w *Writer) flush(ctx context.Context) error {
	if len(w.pending) == 0 && !w.fence {
		return nil
	}
	err := w.write(ctx)
	if err == nil {
		w.pending, w.fence = nil, false
		return nil
	}
	if _, rerr := w.load(ctx); rerr != nil {
		return fmt.Errorf("%w (and reading it again failed: %w)", err, rerr)
	}
	if w.fenced {
		w.pending = nil
		return nil
	}
	return err
}

func (w *Writer) write(ctx context.Context) error {
	now := w.opts.Now()
	segs := w.st.segments
	head := segs[len(segs)-1]
	headEntries := append(append([]Entry(nil), head.entries...), w.pending...)
	sealed := append([]*segment(nil), segs[:len(segs)-1]...)
	var drop []string
	if now.Sub(w.lastTrim) >= trimEvery {
		var err error
		if sealed, headEntries, drop, err = w.trim(ctx, sealed, headEntries, now); err != nil {
			return err
		}
		w.lastTrim = now
	}
	newHead := &segment{name: HeadName, rv: head.rv}
	// The head's entries past HeadLimit are sealed into segments of their
	// own, at most SegmentLimit each; the writer keeps none of their
	// entries.
	chunks := split(headEntries, SegmentLimit, HeadLimit)
	for _, c := range chunks[:len(chunks)-1] {
		seg := &segment{name: NamePrefix + strconv.FormatUint(w.nextNumber, 10), entries: c}
		w.nextNumber++
		if err := w.create(ctx, seg); err != nil {
			return err
		}
		seg.entries = nil
		sealed = append(sealed, seg)
	}
	// A copy: the last chunk is a window on every entry of this write, and
	// kept as the head it would hold them all until the next write (29 MB
	// at a first write over 100,000 held addresses: BENCHMARKS.md).
	newHead.entries = slices.Clone(chunks[len(chunks)-1])
	names := make([]string, len(sealed))
	for i, s := range sealed {
		names[i] = s.name
	}
	if err := w.put(ctx, newHead, map[string]string{keyEpoch: strconv.FormatUint(w.epoch, 10), keyTerm: w.opts.Term, keySegments: strings.Join(names, " ")}); err != nil {
		return err
	}
	w.st.segments = append(sealed, newHead)
	w.st.epoch = w.epoch
	for _, name := range append(drop, w.st.orphans...) {
		if err := w.client.CoreV1().ConfigMaps(w.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			w.opts.Log.Warn("Cannot delete a history ConfigMap no longer listed", "configMap", name, "err", err)
		}
	}
	w.st.orphans = nil
	w.opts.Metrics.setSize(w, *w.st)
	return nil
}

// trim applies retention to the sealed segments and the head's entries
// (headEntries: the head's and those to be written), and returns the
// sealed segments left, the head's entries kept, and the segments emptied
// (to delete once the head no longer lists them). The writer holds no
// sealed segment's entries: retention is decided newest first (the head's
// entries, then each sealed segment read again, newest to oldest, one at a
// time, Retention.trimmer), remembering of each segment only which entries
// it keeps (a byte each); the segments that lose entries are then read
// again and rewritten oldest first, as before (a trim cut short leaves
// the older segments trimmed and the newer whole), each with
// compare-and-swap on the resourceVersion the writer knows (a segment
// somebody else rewrote fails the write: the history is read again).
func (w *Writer) trim(ctx context.Context, sealed []*segment, headEntries []Entry, now time.Time) ([]*segment, []Entry, []string, error) {
	t := w.opts.Retention.trimmer(now)
	headEntries = pick(headEntries, t.run(headEntries))
	read := func(s *segment) ([]Entry, error) {
		cm, err := getOne(ctx, w.client, w.opts.Namespace, s.name)
		if err != nil {
			return nil, err
		}
		if cm.ResourceVersion != s.rv {
			return nil, &configMapError{op: "trim", name: s.name, err: fmt.Errorf("rewritten since read (resourceVersion %s, not %s)", cm.ResourceVersion, s.rv)}
		}
		return decodeEntries(cm.Name, cm.Data[keyEntries])
	}
	keeps := make([][]bool, len(sealed)) // nil: every entry kept
	for i := len(sealed) - 1; i >= 0; i-- {
		entries, err := read(sealed[i])
		if err != nil {
			return nil, nil, nil, err
		}
		if keep := t.run(entries); slices.Contains(keep, false) {
			keeps[i] = keep
		}
	}
	var kept []*segment
	var drop []string
	for i, s := range sealed {
		switch {
		case keeps[i] == nil:
		case !slices.Contains(keeps[i], true):
			drop = append(drop, s.name)
			continue
		default:
			entries, err := read(s)
			if err != nil {
				return nil, nil, nil, err
			}
			if len(entries) != len(keeps[i]) {
				return nil, nil, nil, fmt.Errorf("history ConfigMap %s: %d entries read again, %d when trimmed", s.name, len(entries), len(keeps[i]))
			}
			ns := &segment{name: s.name, rv: s.rv, entries: pick(entries, keeps[i])}
			if err := w.put(ctx, ns, nil); err != nil {
				return nil, nil, nil, err
			}
			ns.entries = nil
			s = ns
		}
		kept = append(kept, s)
	}
	return kept, headEntries, drop, nil
}

// split cuts entries, in order, into runs of at most limit bytes encoded
// (at least one entry each); the last run is the head's: empty if it would
// be more than headLimit.
func split(entries []Entry, limit, headLimit int) [][]Entry {
	var out [][]Entry
	start, size := 0, 0
	for i, e := range entries {
		n := len(encodeEntries([]Entry{e}))
		if size+n > limit && i > start {
			out = append(out, entries[start:i])
			start, size = i, 0
		}
		size += n
	}
	if size > headLimit {
		// A full last run is sealed too: the head starts afresh.
		out = append(out, entries[start:])
		start = len(entries)
	}
	return append(out, entries[start:])
}

func pick(entries []Entry, keep []bool) []Entry {
	var out []Entry
	for i, e := range entries {
		if keep[i] {
			out = append(out, e)
		}
	}
	return out
}

func (w *Writer) configMap(s *segment, extra map[string]string) *corev1.ConfigMap {
	data := map[string]string{keyFormat: Format, keyEntries: encodeEntries(s.entries)}
	for k, v := range extra {
		data[k] = v
	}
	s.size, s.count = len(data[keyEntries]), len(s.entries)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: w.opts.Namespace, ResourceVersion: s.rv,
			Labels:      map[string]string{LabelKey: "true", "app.kubernetes.io/managed-by": "ipledger-ipam"},
			Annotations: indexOf(s.entries, IndexBudget)},
		Data: data,
	}
}

// put writes s: an update with compare-and-swap on the resourceVersion it
// was read at, or a create when it has none (the first head).
func (w *Writer) put(ctx context.Context, s *segment, extra map[string]string) error {
	cms := w.client.CoreV1().ConfigMaps(w.opts.Namespace)
	var out *corev1.ConfigMap
	var err error
	if s.rv == "" {
		out, err = cms.Create(ctx, w.configMap(s, extra), metav1.CreateOptions{FieldManager: ledger.FieldManager})
	} else {
		out, err = cms.Update(ctx, w.configMap(s, extra), metav1.UpdateOptions{FieldManager: ledger.FieldManager})
	}
	if err != nil {
		return &configMapError{op: "write", name: s.name, err: err}
	}
	s.rv = out.ResourceVersion
	return nil
}

func (w *Writer) create(ctx context.Context, s *segment) error {
	s.rv = ""
	return w.put(ctx, s, nil)
}
