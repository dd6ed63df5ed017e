package server

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ipledger/ipledger/pkg/authz"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
)

// AddressHistory pages through the address history, read from its
// ConfigMaps (history.ReadIndexed, else history.Read) on whichever
// replica is asked. A caller
// allowed `get history` only in some namespaces sees only their entries:
// the others are skipped as if absent, so no other namespace is named to
// it, and neither are reservations for no Service.
func (s *Server) AddressHistory(ctx context.Context, req *ipamv1.AddressHistoryRequest) (*ipamv1.AddressHistoryResponse, error) {
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	f, err := historyFilter(req)
	if err != nil {
		return nil, err
	}
	after, err := parseHistoryToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	var visErr error
	if !authz.AllowedEverywhere(ctx) {
		// A gRPC caller's scope is the Authorizer's (cfg.Access); an
		// aggregated API caller's was set by authz.WithNamespaceAccess.
		allowedIn := authz.ContextAllowedIn
		if s.cfg.Access != nil {
			allowedIn = s.cfg.Access.AllowedIn
		}
		allowed := map[string]bool{}
		f.Visible = func(ns string) bool {
			ok, seen := allowed[ns]
			if !seen && visErr == nil {
				ok, visErr = allowedIn(ctx, ns)
				allowed[ns] = ok
			}
			return ok
		}
		if f.Namespace != "" && !f.Visible(f.Namespace) && visErr == nil {
			return nil, status.Errorf(codes.PermissionDenied,
				"may not get history.%s in namespace %s: bind a Role there granting apiGroups [%s], resources [history], verbs [get]",
				authz.Group, f.Namespace, authz.Group)
		}
	}
	// One address, one Service, one pool: the history ConfigMaps' indexes
	// spare reading the segments that do not name them; not cached (a few
	// small reads), so every page sees what is stored. Where the indexes
	// spare nothing (a pool every segment names), or no such filter is
	// set, everything is read, cached.
	entries, indexed, err := history.ReadIndexed(ctx, s.client, s.cfg.Namespace, f)
	if err == nil && !indexed {
		entries, err = s.historyEntries(ctx)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read the address history: %v", err)
	}
	page, next, more := history.Query(entries, f, after, size)
	if visErr != nil {
		return nil, visErr
	}
	resp := &ipamv1.AddressHistoryResponse{Entries: make([]*ipamv1.HistoryEntry, 0, len(page))}
	for _, e := range page {
		resp.Entries = append(resp.Entries, historyProto(e))
	}
	if more {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(next.At.UnixNano(), 10) + " " + strconv.Itoa(next.Seen)))
	}
	return resp, nil
}

// historyTTL is how long a read of the history answers calls: a
// kubectl that follows pages re-reads none of it (≈ 5 s at 180,000
// entries, BENCHMARKS.md), and what it shows is at most this old.
const historyTTL = 15 * time.Second

// historyEntries are the stored entries, read again once historyTTL old
// (one read at a time).
func (s *Server) historyEntries(ctx context.Context) ([]history.Entry, error) {
	s.historyMu.Lock()
	defer s.historyMu.Unlock()
	if s.historyRead.IsZero() || time.Since(s.historyRead) > historyTTL {
		entries, err := history.Read(ctx, s.client, s.cfg.Namespace)
		if err != nil {
			return nil, err
		}
		s.history, s.historyRead = entries, time.Now()
	}
	return s.history, nil
}

func historyFilter(req *ipamv1.AddressHistoryRequest) (history.Filter, error) {
	f := history.Filter{Pool: req.GetPool()}
	if req.GetIp() != "" {
		ip, err := parseIPField("ip", req.GetIp())
		if err != nil {
			return f, err
		}
		f.IP = ip
	}
	if ref := req.GetService(); ref != nil {
		if err := checkServiceRef("service", ref); err != nil {
			return f, err
		}
		f.Namespace, f.Name, f.UID = ref.GetNamespace(), ref.GetName(), ref.GetUid()
	}
	if since := req.GetSince(); since != "" {
		t, err := time.Parse(time.RFC3339, since)
		if err != nil {
			if t, err = time.Parse(time.DateOnly, since); err != nil {
				return f, status.Errorf(codes.InvalidArgument, "since: %q is neither RFC 3339 (2026-11-01T00:00:00Z) nor a date (2026-11-01)", since)
			}
		}
		f.Since = t
	}
	return f, nil
}

func parseHistoryToken(tok string) (history.Cursor, error) {
	if tok == "" {
		return history.Cursor{}, nil
	}
	bad := status.Error(codes.InvalidArgument, "page_token: not a token from next_page_token; omit it to start from the first page")
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return history.Cursor{}, bad
	}
	at, seen, ok := strings.Cut(string(b), " ")
	ns, err1 := strconv.ParseInt(at, 10, 64)
	n, err2 := strconv.Atoi(seen)
	if !ok || err1 != nil || err2 != nil {
		return history.Cursor{}, bad
	}
	return history.Cursor{At: time.Unix(0, ns), Seen: n}, nil
}

func historyProto(e history.Entry) *ipamv1.HistoryEntry {
	out := &ipamv1.HistoryEntry{At: e.At.UTC().Format(time.RFC3339Nano), Ip: e.IP.String(), Pool: e.Pool,
		Action: string(e.Action), By: e.By, Note: e.Note, How: e.How}
	if e.Namespace != "" || e.Name != "" {
		out.Service = &ipamv1.ServiceRef{Namespace: e.Namespace, Name: e.Name, Uid: e.UID}
	}
	return out
}
