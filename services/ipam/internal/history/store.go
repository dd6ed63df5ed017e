package history

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The history's ConfigMaps, in ipam's namespace: a head, HeadName, holding
// the newest entries and the names of the sealed segments; and the sealed
// segments, each holding older entries in the order written. None carries
// the ledger's label, so the stream (and a term's start-up read) never
// reads them, and the ledger's decoder never sees their keys.
const (
	// Format is the value of the `format` key of every history ConfigMap.
	Format = "ipledger.io/history/v1"
	// LabelKey marks history ConfigMaps (value "true").
	LabelKey = "ipledger.io/history"
	// NamePrefix starts every history ConfigMap's name; the suffix is a
	// decimal number, 0 for the head.
	NamePrefix = "ipledger-history-"
	// HeadName is the ConfigMap that lists the others.
	HeadName = NamePrefix + "0"
	// SegmentLimit bounds the encoded entries of a sealed segment (every
	// ConfigMap stays under ~512 KiB, as the ledger's shards do).
	SegmentLimit = 480 * 1024
	// HeadLimit is the encoded size of the head's entries above which they
	// are sealed: the head is rewritten at every write, so it is kept
	// small (the writes of the history stay below the ledger's own).
	HeadLimit = 128 * 1024

	// AddressesAnnotation indexes each history ConfigMap: the distinct
	// addresses of its entries, sorted, space-separated (ReadAddress). A
	// segment holds at most ≈ 2,600 entries, so the index is at most ≈ 100
	// KB (IPv6), under the 256 KiB annotations may take, and the ConfigMap
	// stays well under 1 MiB.
	AddressesAnnotation = "ipledger.io/history-addresses"
	// PoolsAnnotation indexes each history ConfigMap by pool: the
	// distinct pools of its entries, sorted, space-separated (ReadIndexed).
	// ServicesAnnotation indexes it by Service: a Bloom filter of the
	// namespace/name of its entries (bloom.go; entries for no Service add
	// none), ≈ 10 bits per Service — ≤ 4.4 KB for a full segment whatever
	// the names, where their list could pass the 256 KiB an object's
	// annotations may take (2,600 names of 127 characters). Each is
	// written only while the three indexes together stay within
	// IndexBudget; past it (only pools' names long and many enough can
	// pass it) the ConfigMap has no such annotation, and a reader reads it
	// whatever it looks for (as it does a segment written before the index).
	ServicesAnnotation = "ipledger.io/history-services"
	PoolsAnnotation    = "ipledger.io/history-pools"
	// IndexBudget bounds the bytes of a history ConfigMap's index
	// annotations together (keys and values), under the 256 KiB the API
	// server allows for all of an object's annotations. The address index
	// always fits (≤ ≈ 104 KB); the pools' and then the Services' are
	// left out when they would pass it.
	IndexBudget = 200 * 1024

	keyFormat   = "format"
	keyEpoch    = "epoch"
	keyTerm     = "term"
	keySegments = "segments"
	keyEntries  = "entries.jsonl"
)

// segment is one history ConfigMap as last read or written. The writer
// keeps only the head's entries decoded: a sealed segment's are nil there
// (read again, one segment at a time, when retention trims).
type segment struct {
	name    string
	rv      string
	entries []Entry
	// size and count are the bytes and the number of the entries as
	// stored, kept when entries are dropped: the size gauges (Metrics).
	size, count int
}

// encodeEntries is entries as JSON lines.
func encodeEntries(entries []Entry) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, e := range entries {
		e.At = e.At.UTC()
		_ = enc.Encode(e) // an Entry always encodes
	}
	return b.String()
}

// decodeEntries parses JSON lines; name says which ConfigMap is at fault.
func decodeEntries(name, s string) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("history ConfigMap %s: %s line %d: %w", name, keyEntries, line, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// stored is the history as read: the head's epoch and segments in order
// (the sealed ones the head lists, oldest first, then the head).
type stored struct {
	epoch    uint64
	segments []*segment
	// orphans are history ConfigMaps the head does not list (a segment
	// sealed by a writer whose head write then failed): deleted by the
	// next writer, never read.
	orphans []string
}

// entries are every stored entry, in the order written.
func (s stored) entries() []Entry {
	var out []Entry
	for _, seg := range s.segments {
		out = append(out, seg.entries...)
	}
	return out
}

// size is what the stored history holds: entries, bytes of entries, and
// ConfigMaps (a head not written yet is none), from what was read and
// written, without reading anything.
func (s stored) size() (entries, bytes, configMaps int) {
	for _, seg := range s.segments {
		if seg.rv == "" {
			continue
		}
		entries, bytes, configMaps = entries+seg.count, bytes+seg.size, configMaps+1
	}
	return entries, bytes, configMaps
}

// read lists the history ConfigMaps (a quorum read) and parses them.
func read(ctx context.Context, client kubernetes.Interface, namespace string) (stored, error) {
	list, err := client.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelKey + "=true"})
	if err != nil {
		return stored{}, &configMapError{op: "list", name: NamePrefix + "*", err: err}
	}
	byName := map[string]*corev1.ConfigMap{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	head, ok := byName[HeadName]
	if !ok {
		var out stored
		for name := range byName {
			out.orphans = append(out.orphans, name)
		}
		out.segments = []*segment{{name: HeadName}}
		return out, nil
	}
	if f := head.Data[keyFormat]; f != Format {
		return stored{}, fmt.Errorf("history ConfigMap %s: format %q, want %q", HeadName, f, Format)
	}
	var out stored
	if e := head.Data[keyEpoch]; e != "" {
		if out.epoch, err = strconv.ParseUint(e, 10, 64); err != nil {
			return stored{}, fmt.Errorf("history ConfigMap %s: epoch: %w", HeadName, err)
		}
	}
	listed := map[string]bool{HeadName: true}
	for _, name := range strings.Fields(head.Data[keySegments]) {
		cm, ok := byName[name]
		if !ok {
			return stored{}, fmt.Errorf("history ConfigMap %s lists %s, which is missing", HeadName, name)
		}
		seg, err := segmentOf(cm)
		if err != nil {
			return stored{}, err
		}
		listed[name] = true
		out.segments = append(out.segments, seg)
	}
	h, err := segmentOf(head)
	if err != nil {
		return stored{}, err
	}
	out.segments = append(out.segments, h)
	for name := range byName {
		if !listed[name] {
			out.orphans = append(out.orphans, name)
		}
	}
	slices.Sort(out.orphans)
	return out, nil
}

func segmentOf(cm *corev1.ConfigMap) (*segment, error) {
	entries, err := decodeEntries(cm.Name, cm.Data[keyEntries])
	if err != nil {
		return nil, err
	}
	return &segment{name: cm.Name, rv: cm.ResourceVersion, entries: entries, size: len(cm.Data[keyEntries]), count: len(entries)}, nil
}

// Read returns every stored entry, in the order written (a reader's
// query: one LIST of the history ConfigMaps).
func Read(ctx context.Context, client kubernetes.Interface, namespace string) ([]Entry, error) {
	s, err := read(ctx, client, namespace)
	if err != nil {
		return nil, err
	}
	return s.entries(), nil
}

// segmentNumber parses the number of a history ConfigMap's name.
func segmentNumber(name string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(name, NamePrefix), 10, 64)
	return n, err == nil && strings.HasPrefix(name, NamePrefix)
}

// addressesOf is the index of entries (AddressesAnnotation).
func addressesOf(entries []Entry) string {
	ips := make([]netip.Addr, 0, len(entries))
	for _, e := range entries {
		ips = append(ips, e.IP)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	ips = slices.Compact(ips)
	var b strings.Builder
	for i, ip := range ips {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(ip.String())
	}
	return b.String()
}

// indexOf is the index annotations of a ConfigMap holding entries: the
// addresses always, then the pools and the Services each while the whole
// stays within budget bytes (IndexBudget).
func indexOf(entries []Entry, budget int) map[string]string {
	out := map[string]string{AddressesAnnotation: addressesOf(entries)}
	size := len(AddressesAnnotation) + len(out[AddressesAnnotation])
	var pools, services []string
	for _, e := range entries {
		if e.Pool != "" {
			pools = append(pools, e.Pool)
		}
		if e.Namespace != "" || e.Name != "" {
			services = append(services, e.Namespace+"/"+e.Name)
		}
	}
	slices.Sort(pools)
	slices.Sort(services)
	for _, idx := range []struct{ key, value string }{
		{PoolsAnnotation, strings.Join(slices.Compact(pools), " ")},
		{ServicesAnnotation, bloomOf(slices.Compact(services))},
	} {
		if size+len(idx.key)+len(idx.value) > budget {
			continue
		}
		out[idx.key] = idx.value
		size += len(idx.key) + len(idx.value)
	}
	return out
}

// mayHold reports whether a history ConfigMap with annotations may hold
// entries of ip: its index names it, or it has no index (written before
// there was one).
func mayHold(annotations map[string]string, ip netip.Addr) bool {
	return mayHoldMatching(annotations, Filter{IP: ip})
}

// mayHoldMatching reports whether a history ConfigMap with annotations may
// hold entries f matches, by the fields its indexes cover (IP, Namespace
// with Name, Pool): every index it has for a field f sets names the value.
// An index it lacks (written before it existed, or left out past
// IndexBudget) says nothing: it may hold them.
func mayHoldMatching(annotations map[string]string, f Filter) bool {
	names := func(key, value string) bool {
		idx, ok := annotations[key]
		return !ok || strings.Contains(" "+idx+" ", " "+value+" ")
	}
	service := func(name string) bool {
		idx, ok := annotations[ServicesAnnotation]
		return !ok || bloomMayHold(idx, name)
	}
	switch {
	case f.IP.IsValid() && !names(AddressesAnnotation, f.IP.String()),
		f.Namespace != "" && f.Name != "" && !service(f.Namespace+"/"+f.Name),
		f.Pool != "" && !names(PoolsAnnotation, f.Pool):
		return false
	}
	return true
}

// MayHold reports whether a history ConfigMap with annotations may hold
// entries f matches, by its indexes (false: it surely holds none).
func MayHold(annotations map[string]string, f Filter) bool { return mayHoldMatching(annotations, f) }

// Indexed reports whether f sets a field the indexes cover (ReadIndexed
// may spare reading segments).
func (f Filter) Indexed() bool {
	return f.IP.IsValid() || (f.Namespace != "" && f.Name != "") || f.Pool != ""
}

// listMeta lists the history ConfigMaps' metadata (one LIST without
// their data): name → annotations and resourceVersion.
func listMeta(ctx context.Context, client kubernetes.Interface, namespace string) (map[string]metav1.PartialObjectMetadata, error) {
	raw, err := client.CoreV1().RESTClient().Get().Namespace(namespace).Resource("configmaps").
		Param("labelSelector", LabelKey+"=true").
		SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").
		DoRaw(ctx)
	if err != nil {
		return nil, &configMapError{op: "list", name: NamePrefix + "*", err: err}
	}
	var list metav1.PartialObjectMetadataList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("list history ConfigMaps' metadata: %w", err)
	}
	meta := make(map[string]metav1.PartialObjectMetadata, len(list.Items))
	for _, m := range list.Items {
		meta[m.Name] = m
	}
	return meta, nil
}

// getOne reads one history ConfigMap by a LIST of its name (a quorum
// read): ipam's Role grants list on ConfigMaps, not get
// (deploy/kustomize/base/rbac/ipam.yaml).
func getOne(ctx context.Context, client kubernetes.Interface, namespace, name string) (*corev1.ConfigMap, error) {
	l, err := client.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: LabelKey + "=true", FieldSelector: "metadata.name=" + name})
	if err != nil {
		return nil, &configMapError{op: "list", name: name, err: err}
	}
	if len(l.Items) != 1 {
		return nil, fmt.Errorf("history ConfigMap %s: gone while being read; try again", name)
	}
	return &l.Items[0], nil
}

// readHeld reads the history as a writer holds it: the metadata of every
// history ConfigMap (one LIST without data), the head, then each sealed
// segment the head lists, one at a time, replayed into the holders it
// says and dropped. Only the head's entries stay decoded; the sealed
// segments keep their name and resourceVersion (what a trim's
// compare-and-swap needs). It never holds more than one sealed segment
// decoded, so a term's first read of the history costs a segment
// (≤ 480 KiB) and the holders, not every entry.
func readHeld(ctx context.Context, client kubernetes.Interface, namespace string) (stored, Holders, error) {
	meta, err := listMeta(ctx, client, namespace)
	if err != nil {
		return stored{}, nil, err
	}
	said := Holders{}
	if _, ok := meta[HeadName]; !ok {
		var out stored
		for name := range meta {
			out.orphans = append(out.orphans, name)
		}
		slices.Sort(out.orphans)
		out.segments = []*segment{{name: HeadName}}
		return out, said, nil
	}
	head, err := getOne(ctx, client, namespace, HeadName)
	if err != nil {
		return stored{}, nil, err
	}
	if f := head.Data[keyFormat]; f != Format {
		return stored{}, nil, fmt.Errorf("history ConfigMap %s: format %q, want %q", HeadName, f, Format)
	}
	var out stored
	if e := head.Data[keyEpoch]; e != "" {
		if out.epoch, err = strconv.ParseUint(e, 10, 64); err != nil {
			return stored{}, nil, fmt.Errorf("history ConfigMap %s: epoch: %w", HeadName, err)
		}
	}
	listed := map[string]bool{HeadName: true}
	for _, name := range strings.Fields(head.Data[keySegments]) {
		if _, ok := meta[name]; !ok {
			return stored{}, nil, fmt.Errorf("history ConfigMap %s lists %s, which is missing", HeadName, name)
		}
		cm, err := getOne(ctx, client, namespace, name)
		if err != nil {
			return stored{}, nil, err
		}
		seg, err := segmentOf(cm)
		if err != nil {
			return stored{}, nil, err
		}
		for _, e := range seg.entries {
			replay(said, e)
		}
		seg.entries = nil
		listed[name] = true
		out.segments = append(out.segments, seg)
	}
	h, err := segmentOf(head)
	if err != nil {
		return stored{}, nil, err
	}
	for _, e := range h.entries {
		replay(said, e)
	}
	out.segments = append(out.segments, h)
	for name := range meta {
		if !listed[name] {
			out.orphans = append(out.orphans, name)
		}
	}
	slices.Sort(out.orphans)
	return out, said, nil
}

// ReadAddress returns the stored entries of ip, in the order written,
// reading only what may hold them: the history ConfigMaps' metadata (one
// LIST, without their data), the head, and the sealed segments whose index
// (AddressesAnnotation) names ip — at 100,000 entries, a few of ≈ 40
// segments (BENCHMARKS.md). A segment rewritten between the LIST and its
// GET is read as rewritten.
func ReadAddress(ctx context.Context, client kubernetes.Interface, namespace string, ip netip.Addr) ([]Entry, error) {
	out, _, err := readIndexed(ctx, client, namespace, Filter{IP: ip}, true)
	return out, err
}

// ReadIndexed returns the stored entries f matches by the fields the
// indexes cover (IP, Namespace with Name, Pool; the others — Since, UID,
// Visible — are left to Query), in the order written, reading only the
// history ConfigMaps' metadata (one LIST without data), the head, and the
// sealed segments whose indexes (AddressesAnnotation, ServicesAnnotation,
// PoolsAnnotation) may hold them. ok is false, and nothing is read past
// the metadata, when the indexes spare no segment (a pool that every
// segment names, or no indexed field set): the caller reads everything
// instead (Read, which a server caches).
func ReadIndexed(ctx context.Context, client kubernetes.Interface, namespace string, f Filter) (entries []Entry, ok bool, err error) {
	if !f.Indexed() {
		return nil, false, nil
	}
	return readIndexed(ctx, client, namespace, Filter{IP: f.IP, Namespace: f.Namespace, Name: f.Name, Pool: f.Pool}, false)
}

func readIndexed(ctx context.Context, client kubernetes.Interface, namespace string, f Filter, always bool) ([]Entry, bool, error) {
	meta, err := listMeta(ctx, client, namespace)
	if err != nil {
		return nil, false, err
	}
	if _, ok := meta[HeadName]; !ok {
		return nil, true, nil
	}
	if !always {
		spared := false
		for name, m := range meta {
			if name != HeadName && !mayHoldMatching(m.Annotations, f) {
				spared = true
				break
			}
		}
		if !spared {
			return nil, false, nil
		}
	}
	get := func(name string) (*corev1.ConfigMap, error) { return getOne(ctx, client, namespace, name) }
	head, err := get(HeadName)
	if err != nil {
		return nil, false, err
	}
	if fm := head.Data[keyFormat]; fm != Format {
		return nil, false, fmt.Errorf("history ConfigMap %s: format %q, want %q", HeadName, fm, Format)
	}
	var out []Entry
	keep := func(cm *corev1.ConfigMap) error {
		seg, err := segmentOf(cm)
		if err != nil {
			return err
		}
		for _, e := range seg.entries {
			if f.match(e) {
				out = append(out, e)
			}
		}
		return nil
	}
	for _, name := range strings.Fields(head.Data[keySegments]) {
		m, ok := meta[name]
		if ok && !mayHoldMatching(m.Annotations, f) {
			continue
		}
		cm, err := get(name)
		if err != nil {
			return nil, false, err
		}
		if err := keep(cm); err != nil {
			return nil, false, err
		}
	}
	if err := keep(head); err != nil {
		return nil, false, err
	}
	return out, true, nil
}
