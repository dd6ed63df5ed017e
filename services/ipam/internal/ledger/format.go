// Package ledger owns ipam's record of every address it has handed out: the
// ConfigMaps `ipledger-ledger-<n>` in ipam's namespace. The ledger is the
// authority a new leader rebuilds from, so it is written before a Service's
// status (and cleared after), every write is a compare-and-swap on the
// ConfigMap's resourceVersion stamped with the writer's epoch, and a shard
// that cannot be parsed stops allocation and is never overwritten.
//
// The format is meant to be read by people (`kubectl get cm -o yaml`):
//
//	data:
//	  format: ipledger.io/ledger/v1
//	  epoch: "7"                 # the writer's fencing epoch: one more for every term that opened the ledger
//	  term: ipam-0/3/2026-11-30T12:00:00Z   # the lease term of the last writer, for people
//	  shards.jsonl: |            # head shard only: the other shards and the lowest IP each holds
//	    {"name":"ipledger-ledger-1","from":"10.0.40.0"}
//	  allocations.jsonl: |       # sorted by IP, then Service
//	    {"ip":"10.0.0.1","pool":"blue","service":"default/web","uid":"…","allocatedAt":"…"}
//	  reservations.jsonl: |
//	    {"ip":"10.0.0.9","note":"DNS for the lab","createdAt":"…"}
//
// Shard `ipledger-ledger-0` is the head: it lists every other shard with the
// lowest IP it covers. Each shard holds the allocations and reservations of
// one contiguous IP range; an entry found in a shard whose range does not
// cover it is the leftover of an interrupted split and is ignored.
//
// Terms are ordered by the epoch, a counter the ledger owns, never by the
// Lease (whose transitions count starts again from 0 when the Lease is
// deleted or the ledger is restored into another cluster): see Open and
// docs/fencing.md. A shard written before epochs existed has none and reads
// as epoch 0.
package ledger

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// Format is the value of the `format` key of every ledger ConfigMap.
	Format = "ipledger.io/ledger/v1"
	// LabelKey marks ledger ConfigMaps (value "true"); the watcher streams them.
	LabelKey = "ipledger.io/ledger"
	// NamePrefix starts every shard's name; the suffix is a decimal number.
	NamePrefix = "ipledger-ledger-"
	// HeadName is the shard that lists the others.
	HeadName = NamePrefix + "0"
	// ReleasedAnnotation on the head names the epoch whose term ended
	// cleanly: every write of it answered, none to come (Ledger.Release).
	// The next term then rewrites the head alone (docs/fencing.md). Any
	// write of the head drops it.
	ReleasedAnnotation = "ipledger.io/released-epoch"

	keyFormat       = "format"
	keyEpoch        = "epoch"
	keyTerm         = "term"
	keyShards       = "shards.jsonl"
	keyAllocations  = "allocations.jsonl"
	keyReservations = "reservations.jsonl"
)

// DefaultShardLimit is the encoded size above which a shard is split. It keeps
// every ConfigMap under ~512 KiB with room for the metadata.
const DefaultShardLimit = 480 * 1024

// ServiceRef names a Service; UID tells a re-created Service from the old one.
type ServiceRef struct {
	Namespace string
	Name      string
	UID       string
}

// Key is "namespace/name".
func (r ServiceRef) Key() string { return r.Namespace + "/" + r.Name }

// Allocation is one IP held by one Service.
type Allocation struct {
	IP          netip.Addr
	Pool        string
	Service     ServiceRef
	SharingKey  string
	AllocatedAt time.Time
}

// Reservation holds an IP outside any Service. ForService, when set, is the
// only Service that may be granted the IP, by requesting it.
type Reservation struct {
	IP         netip.Addr
	Note       string
	ForService *ServiceRef
	CreatedAt  time.Time
}

// A kept reservation (an address kept for the Service that released it, for
// its pool's grace period; docs/pools.md) is a reservation whose note is
// KeptNote: ForService is that Service (with the UID it had), CreatedAt the
// release. It is written in the shape the previous release reads — a
// reservation for that Service, which nothing else is given — because a
// 0.2 ipam refuses any field it does not know (docs/upgrading.md).
const keptNotePrefix = "ipledger.io/kept"

// KeptNote is the note of a reservation that keeps an address for the
// Service that released it, held under sharingKey ("" for none).
func KeptNote(sharingKey string) string { return KeptNoteFor(sharingKey, "") }

// KeptNoteFor is KeptNote for a Service that counted against the quotas of
// namespace tenant rather than its own (a Gateway's Service made in the
// Gateway controller's namespace); "" is its own.
func KeptNoteFor(sharingKey, tenant string) string {
	note := keptNotePrefix
	if tenant != "" {
		note += " tenant=" + tenant
	}
	if sharingKey != "" {
		note += " sharingKey=" + sharingKey
	}
	return note
}

// Kept reports whether r keeps an address for the Service that released it,
// and the sharing key it was held under.
func (r Reservation) Kept() (sharingKey string, ok bool) {
	_, key, ok := r.kept()
	return key, ok
}

// KeptTenant is the namespace whose quotas a kept reservation counts
// against when it is not its Service's own (KeptNoteFor), else "".
func (r Reservation) KeptTenant() string {
	tenant, _, _ := r.kept()
	return tenant
}

func (r Reservation) kept() (tenant, sharingKey string, ok bool) {
	if r.ForService == nil {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(r.Note, keptNotePrefix)
	if !ok {
		return "", "", false
	}
	if t, ok := strings.CutPrefix(rest, " tenant="); ok {
		tenant, rest, _ = strings.Cut(t, " ")
		if tenant == "" {
			return "", "", false
		}
		if rest != "" {
			rest = " " + rest
		}
	}
	if rest == "" {
		return tenant, "", true
	}
	key, ok := strings.CutPrefix(rest, " sharingKey=")
	return tenant, key, ok && key != ""
}

// IsKeptNote reports whether note is in the form of KeptNote, which only ipam
// writes: an operator's reservation may not take it.
func IsKeptNote(note string) bool { return strings.HasPrefix(note, keptNotePrefix) }

// IndexEntry places one non-head shard: it holds the IPs from From up to the
// next shard's From.
type IndexEntry struct {
	Name string
	From netip.Addr
}

// Shard is the decoded content of one ledger ConfigMap.
type Shard struct {
	Name string
	// Epoch is the fencing epoch of the last writer (0: written before
	// epochs existed).
	Epoch uint64
	// Term is the lease term of the last writer, for people: it orders
	// nothing.
	Term string
	// Index is set on the head shard only, sorted by From.
	Index        []IndexEntry
	Allocations  []Allocation
	Reservations []Reservation
}

// State is the whole ledger, assembled from its shards, sorted by IP.
type State struct {
	Allocations  []Allocation
	Reservations []Reservation
}

// SyntaxError says which shard, key and line could not be parsed.
type SyntaxError struct {
	Shard string
	Key   string
	Line  int
	Err   error
}

// Error names the shard, and the key and line when known.
func (e *SyntaxError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("ledger shard %s: %s line %d: %v", e.Shard, e.Key, e.Line, e.Err)
	}
	if e.Key != "" {
		return fmt.Sprintf("ledger shard %s: %s: %v", e.Shard, e.Key, e.Err)
	}
	return fmt.Sprintf("ledger shard %s: %v", e.Shard, e.Err)
}

// Unwrap returns the error met at the place the SyntaxError names.
func (e *SyntaxError) Unwrap() error { return e.Err }

// ShardNumber returns n of `ipledger-ledger-<n>`, or false.
func ShardNumber(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, NamePrefix)
	if !ok || s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// ShardName returns `ipledger-ledger-<n>`.
func ShardName(n int) string { return NamePrefix + strconv.Itoa(n) }

// Wire forms: flat, short and stable so a line reads at a glance.
type allocationLine struct {
	IP          string `json:"ip"`
	Pool        string `json:"pool"`
	Service     string `json:"service"`
	UID         string `json:"uid,omitempty"`
	SharingKey  string `json:"sharingKey,omitempty"`
	AllocatedAt string `json:"allocatedAt"`
}

type reservationLine struct {
	IP         string `json:"ip"`
	Note       string `json:"note"`
	ForService string `json:"forService,omitempty"`
	ForUID     string `json:"forUid,omitempty"`
	CreatedAt  string `json:"createdAt"`
}

type indexLine struct {
	Name string `json:"name"`
	From string `json:"from"`
}

// CompareAllocations orders by IP, then namespace/name.
func CompareAllocations(a, b Allocation) int {
	if c := a.IP.Compare(b.IP); c != 0 {
		return c
	}
	if c := strings.Compare(a.Service.Namespace, b.Service.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Service.Name, b.Service.Name)
}

// compareReservations orders by IP (a shard reserves an IP once).
func compareReservations(a, b Reservation) int { return a.IP.Compare(b.IP) }

// Encode renders a shard as ConfigMap data. Entries are sorted; the output is
// a pure function of the input so an unchanged shard encodes to equal bytes.
func Encode(s Shard) map[string]string { return encode(s, nil) }

// encode is Encode taking the allocations' lines from c where it kept them
// (nil: none), and keeping this shard's in it for the next time.
func encode(s Shard, c *lineCache) map[string]string {
	allocs := slices.Clone(s.Allocations)
	slices.SortFunc(allocs, CompareAllocations)
	res := slices.Clone(s.Reservations)
	slices.SortFunc(res, compareReservations)

	data := map[string]string{keyFormat: Format, keyEpoch: strconv.FormatUint(s.Epoch, 10), keyTerm: s.Term}
	data[keyAllocations] = c.allocationLines(s.Name, allocs)
	data[keyReservations] = lines(res, typicalLine, func(b []byte, r Reservation) []byte { return reservationLineOf(r).append(b) })
	if s.Name == HeadName {
		data[keyShards] = lines(s.Index, 64, func(b []byte, e IndexEntry) []byte {
			return indexLine{Name: e.Name, From: e.From.String()}.append(b)
		})
	}
	return data
}

// reservationLineOf is r's line.
func reservationLineOf(r Reservation) reservationLine {
	l := reservationLine{IP: r.IP.String(), Note: r.Note, CreatedAt: formatTime(r.CreatedAt)}
	if r.ForService != nil {
		l.ForService, l.ForUID = r.ForService.Key(), r.ForService.UID
	}
	return l
}

// allocationLineOf is a's line.
func allocationLineOf(a Allocation) allocationLine {
	return allocationLine{
		IP: a.IP.String(), Pool: a.Pool, Service: a.Service.Key(), UID: a.Service.UID,
		SharingKey: a.SharingKey, AllocatedAt: formatTime(a.AllocatedAt),
	}
}

// append appends the line as encoding/json's Encoder writes the struct
// (field order, omitempty, newline), as do reservationLine's and
// indexLine's; TestLinesAreEncodingJSON holds them to it.
func (l allocationLine) append(b []byte) []byte {
	return appendObject(b, []jsonField{{"ip", l.IP, false}, {"pool", l.Pool, false}, {"service", l.Service, false},
		{"uid", l.UID, true}, {"sharingKey", l.SharingKey, true}, {"allocatedAt", l.AllocatedAt, false}})
}

func (l reservationLine) append(b []byte) []byte {
	return appendObject(b, []jsonField{{"ip", l.IP, false}, {"note", l.Note, false}, {"forService", l.ForService, true},
		{"forUid", l.ForUID, true}, {"createdAt", l.CreatedAt, false}})
}

func (l indexLine) append(b []byte) []byte {
	return appendObject(b, []jsonField{{"name", l.Name, false}, {"from", l.From, false}})
}

// jsonField is one string field of a ledger line: its JSON name, its value,
// and whether an empty value is left out (omitempty).
type jsonField struct {
	name, value string
	omitEmpty   bool
}

// appendObject appends fields as one JSON object and a newline. A shard is
// encoded whole at every commit that touches it, and encoding/json's
// reflection was a fifth of ipam's CPU in steady state at 10,000 Services.
func appendObject(b []byte, fields []jsonField) []byte {
	b = append(b, '{')
	first := true
	for _, f := range fields {
		if f.omitEmpty && f.value == "" {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, f.name...)
		b = append(b, '"', ':')
		b = appendString(b, f.value)
	}
	return append(b, '}', '\n')
}

// appendString appends s as a JSON string: as is when it is printable ASCII
// that needs no escape (IPs, names, UIDs, times: nearly every value), else
// as encoding/json writes it (HTML characters, control characters and
// non-ASCII escaped or validated as it does).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always encodes
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// typicalLine is about the length of one allocation's line (an
// IPv4 address, a UID, a time): what lines reserves per entry up front.
const typicalLine = 160

// lines writes one JSON line per entry into a string sized for them up
// front: a shard is up to 480 KiB, and a buffer grown by doubling, then
// copied into a string, left three times that as garbage at every write.
func lines[E any](entries []E, typical int, line func([]byte, E) []byte) string {
	var b strings.Builder
	b.Grow(len(entries) * typical)
	buf := make([]byte, 0, typical)
	for _, e := range entries {
		buf = line(buf[:0], e)
		b.Write(buf)
	}
	return b.String()
}

// Size is the number of bytes data occupies in a ConfigMap.
func Size(data map[string]string) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	return n
}

// formatTime is t in RFC 3339, UTC, or "" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// Decode parses one shard's ConfigMap data. It is strict: an unknown format,
// an unknown key or field, an invalid IP, a Service that is not
// "namespace/name", or the same IP and Service twice is an error, because a
// ledger that is misread would hand out an address twice.
func Decode(name string, data map[string]string) (Shard, error) {
	if key, err := checkKeys(name, data); err != nil {
		return Shard{}, &SyntaxError{Shard: name, Key: key, Err: err}
	}
	s := Shard{Name: name, Term: data[keyTerm]}
	var err error
	if s.Epoch, err = decodeEpoch(data); err != nil {
		return Shard{}, &SyntaxError{Shard: name, Key: keyEpoch, Err: err}
	}
	if s.Allocations, err = decodeAllocations(data[keyAllocations]); err != nil {
		return Shard{}, keyError(name, keyAllocations, err)
	}
	if s.Reservations, err = decodeReservations(data[keyReservations]); err != nil {
		return Shard{}, keyError(name, keyReservations, err)
	}
	if name == HeadName {
		if s.Index, err = decodeIndex(data[keyShards]); err != nil {
			return Shard{}, keyError(name, keyShards, err)
		}
	}
	slices.SortFunc(s.Allocations, CompareAllocations)
	slices.SortFunc(s.Reservations, compareReservations)
	return s, nil
}

// keyError is err, met in the JSON lines of key in shard, as a *SyntaxError
// naming the line when err is a *lineError.
func keyError(shard, key string, err error) *SyntaxError {
	var le *lineError
	if errors.As(err, &le) {
		return &SyntaxError{Shard: shard, Key: key, Line: le.line, Err: le.err}
	}
	return &SyntaxError{Shard: shard, Key: key, Err: err}
}

// checkKeys checks the keys of a shard called name: the format must be
// Format, only the head may list shards, and no key may be unknown. It
// returns the key at fault and why.
func checkKeys(name string, data map[string]string) (key string, err error) {
	f, ok := data[keyFormat]
	if !ok {
		return keyFormat, errors.New("missing; this ConfigMap is not a ledger shard")
	}
	if f != Format {
		return keyFormat, fmt.Errorf("%q is not %q (written by a newer ipam?)", f, Format)
	}
	for k := range data {
		switch k {
		case keyFormat, keyEpoch, keyTerm, keyAllocations, keyReservations:
		case keyShards:
			if name != HeadName {
				return k, fmt.Errorf("only %s lists shards", HeadName)
			}
		default:
			return k, errors.New("unknown key")
		}
	}
	return "", nil
}

// decodeEpoch returns the epoch key of data, 0 when there is none (a shard
// written before epochs existed).
func decodeEpoch(data map[string]string) (uint64, error) {
	e, ok := data[keyEpoch]
	if !ok {
		return 0, nil
	}
	return parseEpoch(e)
}

// decodeAllocations parses allocations.jsonl; the same IP and Service twice
// is an error. An error names its line (*lineError).
func decodeAllocations(text string) ([]Allocation, error) {
	var out []Allocation
	seen := map[string]bool{}
	err := eachLine(text, func(line []byte) error {
		a, err := parseAllocation(line)
		if err != nil {
			return err
		}
		k := a.IP.String() + " " + a.Service.Key()
		if seen[k] {
			return fmt.Errorf("%s is recorded twice for %s", a.IP, a.Service.Key())
		}
		seen[k] = true
		out = append(out, a)
		return nil
	})
	return out, err
}

// parseAllocation parses one line of allocations.jsonl.
func parseAllocation(line []byte) (Allocation, error) {
	var l allocationLine
	if err := strictUnmarshal(line, &l); err != nil {
		return Allocation{}, err
	}
	a := Allocation{Pool: l.Pool, SharingKey: l.SharingKey}
	var err error
	if a.IP, err = parseIP(l.IP); err != nil {
		return Allocation{}, err
	}
	if a.Pool == "" {
		return Allocation{}, errors.New("pool is empty")
	}
	if a.Service, err = parseServiceRef(l.Service); err != nil {
		return Allocation{}, fmt.Errorf("service: %w", err)
	}
	a.Service.UID = l.UID
	if a.AllocatedAt, err = parseTime(l.AllocatedAt); err != nil {
		return Allocation{}, fmt.Errorf("allocatedAt: %w", err)
	}
	return a, nil
}

// decodeReservations parses reservations.jsonl; the same IP twice is an
// error. An error names its line (*lineError).
func decodeReservations(text string) ([]Reservation, error) {
	var out []Reservation
	seen := map[netip.Addr]bool{}
	err := eachLine(text, func(line []byte) error {
		r, err := parseReservation(line)
		if err != nil {
			return err
		}
		if seen[r.IP] {
			return fmt.Errorf("%s is reserved twice", r.IP)
		}
		seen[r.IP] = true
		out = append(out, r)
		return nil
	})
	return out, err
}

// parseReservation parses one line of reservations.jsonl.
func parseReservation(line []byte) (Reservation, error) {
	var l reservationLine
	if err := strictUnmarshal(line, &l); err != nil {
		return Reservation{}, err
	}
	r := Reservation{Note: l.Note}
	var err error
	if r.IP, err = parseIP(l.IP); err != nil {
		return Reservation{}, err
	}
	if l.ForService != "" {
		ref, err := parseServiceRef(l.ForService)
		if err != nil {
			return Reservation{}, fmt.Errorf("forService: %w", err)
		}
		ref.UID = l.ForUID
		r.ForService = &ref
	} else if l.ForUID != "" {
		return Reservation{}, errors.New("forUid without forService")
	}
	if r.CreatedAt, err = parseTime(l.CreatedAt); err != nil {
		return Reservation{}, fmt.Errorf("createdAt: %w", err)
	}
	return r, nil
}

// decodeIndex parses the head's shards.jsonl: each shard listed once, in
// increasing order of From. An error names its line (*lineError).
func decodeIndex(text string) ([]IndexEntry, error) {
	var out []IndexEntry
	names := map[string]bool{}
	err := eachLine(text, func(line []byte) error {
		e, err := parseIndexEntry(line)
		if err != nil {
			return err
		}
		if names[e.Name] {
			return fmt.Errorf("%s is listed twice", e.Name)
		}
		names[e.Name] = true
		if k := len(out); k > 0 && out[k-1].From.Compare(e.From) >= 0 {
			return fmt.Errorf("from %s does not follow %s: shards must be listed in increasing order", e.From, out[k-1].From)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// parseIndexEntry parses one line of shards.jsonl.
func parseIndexEntry(line []byte) (IndexEntry, error) {
	var l indexLine
	if err := strictUnmarshal(line, &l); err != nil {
		return IndexEntry{}, err
	}
	if num, ok := ShardNumber(l.Name); !ok || num == 0 {
		return IndexEntry{}, fmt.Errorf("name %q is not %s<n> with n > 0", l.Name, NamePrefix)
	}
	from, err := parseIP(l.From)
	if err != nil {
		return IndexEntry{}, fmt.Errorf("from: %w", err)
	}
	return IndexEntry{Name: l.Name, From: from}, nil
}

// lineError is an error met on a line of a JSON lines key, numbered from 1.
type lineError struct {
	line int
	err  error
}

// Error names the line.
func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }

// Unwrap returns the error met on the line.
func (e *lineError) Unwrap() error { return e.err }

// eachLine calls fn for every non-blank line; an error is returned as a
// *lineError naming the line (numbered from 1).
func eachLine(text string, fn func(line []byte) error) error {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := fn(line); err != nil {
			return &lineError{line: n, err: err}
		}
	}
	if err := sc.Err(); err != nil {
		return &lineError{line: n + 1, err: err}
	}
	return nil
}

// strictUnmarshal decodes line, one JSON value, into v; an unknown field is
// an error.
func strictUnmarshal(line []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

// parseEpoch accepts only the canonical decimal form, so that what decodes
// encodes back to the same text.
func parseEpoch(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || strconv.FormatUint(n, 10) != s {
		return 0, fmt.Errorf("%q is not a decimal counter", s)
	}
	return n, nil
}

// parseIP accepts a plain IPv4 or IPv6 address: no zone, no IPv4-mapped
// IPv6 form (which would make a second key for one address).
func parseIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("ip: %w", err)
	}
	if ip.Zone() != "" || ip.Is4In6() {
		return netip.Addr{}, fmt.Errorf("ip %q: not a plain IPv4 or IPv6 address", s)
	}
	return ip, nil
}

// parseServiceRef parses "namespace/name" (without the UID).
func parseServiceRef(s string) (ServiceRef, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return ServiceRef{}, fmt.Errorf("%q is not namespace/name", s)
	}
	return ServiceRef{Namespace: ns, Name: name}, nil
}

// parseTime parses RFC 3339; "" is the zero time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339, s)
}

// Layout is the decoded shape of a ledger: shards in IP order, the head first.
type Layout []Shard

// ShardFor returns the position, in the layout the head describes (0 = the
// head itself), of the shard whose range holds ip.
func ShardFor(head Shard, ip netip.Addr) int {
	i, _ := slices.BinarySearchFunc(head.Index, ip, func(e IndexEntry, ip netip.Addr) int {
		if e.From.Compare(ip) <= 0 {
			return -1
		}
		return 1
	})
	return i
}

// Assemble checks the shards against the head's index and returns the
// ledger's state. Shards not listed by the head are ignored (an interrupted
// split, or a stale leader's create that never made it into the index); an
// entry outside its shard's range is ignored too. A listed shard that is
// missing is an error.
func Assemble(shards map[string]Shard) (State, Layout, error) {
	head, ok := shards[HeadName]
	if !ok {
		if len(shards) == 0 {
			return State{}, nil, nil
		}
		return State{}, nil, fmt.Errorf("ledger head %s is missing but %d other shard(s) exist", HeadName, len(shards))
	}
	layout := Layout{head}
	for _, e := range head.Index {
		s, ok := shards[e.Name]
		if !ok {
			return State{}, nil, fmt.Errorf("ledger shard %s listed by %s is missing", e.Name, HeadName)
		}
		layout = append(layout, s)
	}
	return layout.State(), layout, nil
}

// State is what the layout records: each shard's entries within its range
// (an interrupted split leaves copies outside it), sorted.
func (l Layout) State() State {
	var st State
	allocs, res := l.Counts()
	st.Allocations, st.Reservations = make([]Allocation, 0, allocs), make([]Reservation, 0, res)
	l.inRange(func(a *Allocation) { st.Allocations = append(st.Allocations, *a) },
		func(r *Reservation) { st.Reservations = append(st.Reservations, *r) })
	slices.SortFunc(st.Allocations, CompareAllocations)
	slices.SortFunc(st.Reservations, compareReservations)
	return st
}

// Counts returns how many allocations and reservations State would hold,
// without building it.
func (l Layout) Counts() (allocations, reservations int) {
	l.inRange(func(*Allocation) { allocations++ }, func(*Reservation) { reservations++ })
	return allocations, reservations
}

// inRange calls alloc and res with each entry of every shard within the
// shard's range.
func (l Layout) inRange(alloc func(*Allocation), res func(*Reservation)) {
	for i := range l {
		l.inShardRange(i, alloc, res)
	}
}

// inShardRange calls alloc and res with each entry of the i-th shard within
// its range (an interrupted split leaves copies outside it).
func (l Layout) inShardRange(i int, alloc func(*Allocation), res func(*Reservation)) {
	lo, hi := bounds(l[0], i)
	s := &l[i]
	for j := range s.Allocations {
		if inRange(s.Allocations[j].IP, lo, hi) {
			alloc(&s.Allocations[j])
		}
	}
	for j := range s.Reservations {
		if inRange(s.Reservations[j].IP, lo, hi) {
			res(&s.Reservations[j])
		}
	}
}

// withinRange returns the entries of the i-th shard within its range: the
// shard's own slices when all are (no interrupted split left copies in it),
// so that a term's shards and the layout it read share their entries
// rather than hold them twice while the term starts. Nothing edits a
// shard's slices in place (editShards edits copies).
func (l Layout) withinRange(i int) ([]Allocation, []Reservation) {
	s := &l[i]
	nAllocs, nRes := 0, 0
	l.inShardRange(i, func(*Allocation) { nAllocs++ }, func(*Reservation) { nRes++ })
	if nAllocs == len(s.Allocations) && nRes == len(s.Reservations) {
		return slices.Clip(s.Allocations), slices.Clip(s.Reservations)
	}
	allocs, res := make([]Allocation, 0, nAllocs), make([]Reservation, 0, nRes)
	l.inShardRange(i, func(a *Allocation) { allocs = append(allocs, *a) }, func(r *Reservation) { res = append(res, *r) })
	return allocs, res
}

// bounds returns the range [lo, hi) of the i-th shard of the layout; an
// invalid Addr means unbounded.
func bounds(head Shard, i int) (lo, hi netip.Addr) {
	if i > 0 {
		lo = head.Index[i-1].From
	}
	if i < len(head.Index) {
		hi = head.Index[i].From
	}
	return lo, hi
}

// inRange reports whether ip is in [lo, hi); an invalid bound is unbounded.
func inRange(ip, lo, hi netip.Addr) bool {
	return (!lo.IsValid() || lo.Compare(ip) <= 0) && (!hi.IsValid() || ip.Compare(hi) < 0)
}

// Split cuts a shard whose encoding exceeds limit into pieces that each
// encode to at most about limit/2 bytes, so each has room to grow. The first
// piece keeps s's name; the others get names from newName and are returned
// with the lowest IP each covers. IPs are never divided: all entries of one
// IP stay in one piece. A shard within limit is returned unchanged.
func Split(s Shard, limit int, newName func() string) (first Shard, rest []Shard, from []netip.Addr) {
	if Size(Encode(s)) <= limit {
		return s, nil, nil
	}
	type ipEntries struct {
		ip    netip.Addr
		size  int
		alloc []Allocation
		res   []Reservation
	}
	var groups []ipEntries
	add := func(ip netip.Addr) *ipEntries {
		if n := len(groups); n > 0 && groups[n-1].ip == ip {
			return &groups[n-1]
		}
		groups = append(groups, ipEntries{ip: ip})
		return &groups[len(groups)-1]
	}
	// Merge the sorted allocations and reservations by IP.
	allocs := slices.Clone(s.Allocations)
	slices.SortFunc(allocs, CompareAllocations)
	res := slices.Clone(s.Reservations)
	slices.SortFunc(res, compareReservations)
	i, j := 0, 0
	for i < len(allocs) || j < len(res) {
		if j >= len(res) || (i < len(allocs) && allocs[i].IP.Compare(res[j].IP) <= 0) {
			g := add(allocs[i].IP)
			g.alloc = append(g.alloc, allocs[i])
			g.size += lineSize(allocs[i])
			i++
		} else {
			g := add(res[j].IP)
			g.res = append(g.res, res[j])
			g.size += reservationSize(res[j])
			j++
		}
	}
	target := limit / 2
	pieces := []Shard{{Name: s.Name, Epoch: s.Epoch, Term: s.Term, Index: s.Index}}
	curSize := Size(Encode(pieces[0]))
	for _, g := range groups {
		cur := &pieces[len(pieces)-1]
		if curSize+g.size > target && len(cur.Allocations)+len(cur.Reservations) > 0 {
			pieces = append(pieces, Shard{Name: newName(), Epoch: s.Epoch, Term: s.Term})
			from = append(from, g.ip)
			cur = &pieces[len(pieces)-1]
			curSize = Size(Encode(*cur))
		}
		cur.Allocations = append(cur.Allocations, g.alloc...)
		cur.Reservations = append(cur.Reservations, g.res...)
		curSize += g.size
	}
	return pieces[0], pieces[1:], from
}

// lineSize is the length of a's line in allocations.jsonl.
func lineSize(a Allocation) int { return len(allocationLineOf(a).append(nil)) }

// reservationSize is the length of r's line in reservations.jsonl.
func reservationSize(r Reservation) int { return len(reservationLineOf(r).append(nil)) }
