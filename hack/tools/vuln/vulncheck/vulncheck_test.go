package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLatestFix(t *testing.T) {
	semverRange := func(events ...string) osvRange {
		r := osvRange{Type: "SEMVER"}
		for i := 0; i < len(events); i += 2 {
			r.Events = append(r.Events, struct {
				Introduced string `json:"introduced,omitempty"`
				Fixed      string `json:"fixed,omitempty"`
			}{events[i], events[i+1]})
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		ranges []osvRange
		want   string
	}{
		{"one fix", []osvRange{semverRange("0", "", "", "1.6.0")}, "1.6.0"},
		{"the highest of two branches", []osvRange{semverRange("0", "", "", "1.26.9", "1.27.0-0", "", "", "1.27.2")}, "1.27.2"},
		{"ranges apart", []osvRange{semverRange("0", "", "", "0.60.0"), semverRange("0", "", "", "0.62.0")}, "0.62.0"},
		{"reintroduced after the fix", []osvRange{semverRange("0", "", "", "1.2.0", "1.3.0", "")}, ""},
		{"never fixed", []osvRange{semverRange("0", "")}, ""},
		{"not SEMVER", []osvRange{{Type: "GIT"}}, ""},
	} {
		if got := latestFix(tc.ranges); got != tc.want {
			t.Errorf("%s: latestFix = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestBuildDB(t *testing.T) {
	osv, out := t.TempDir(), t.TempDir()
	reports := map[string]string{
		"GO-2026-0001": `{"id":"GO-2026-0001","modified":"0001-01-01T00:00:00Z","aliases":["CVE-2026-1"],
			"affected":[{"package":{"name":"golang.org/x/net"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"0.62.0"}]}]}]}`,
		"GO-2026-0002": `{"id":"GO-2026-0002","modified":"0001-01-01T00:00:00Z",
			"affected":[{"package":{"name":"stdlib"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.26.9"}]}]},
			            {"package":{"name":"golang.org/x/net"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"0.60.0"}]}]}]}`,
	}
	for id, r := range reports {
		if err := os.WriteFile(filepath.Join(osv, id+".json"), []byte(r), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 11, 5, 23, 49, 57, 0, time.UTC)
	if n, err := buildDB(osv, out, at); err != nil || n != 2 {
		t.Fatalf("buildDB = %d, %v; want 2 reports", n, err)
	}
	read := func(name string, v any) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var db dbMeta
	read("index/db.json", &db)
	if !db.Modified.Equal(at) {
		t.Errorf("db.json modified = %v, want the vulndb version's time %v", db.Modified, at)
	}
	var mods []moduleMeta
	read("index/modules.json", &mods)
	got, _ := json.Marshal(mods)
	want := `[{"path":"golang.org/x/net","vulns":[{"id":"GO-2026-0001","modified":"0001-01-01T00:00:00Z","fixed":"0.62.0"},{"id":"GO-2026-0002","modified":"0001-01-01T00:00:00Z","fixed":"0.60.0"}]},` +
		`{"path":"stdlib","vulns":[{"id":"GO-2026-0002","modified":"0001-01-01T00:00:00Z","fixed":"1.26.9"}]}]`
	if string(got) != want {
		t.Errorf("modules.json =\n%s\nwant\n%s", got, want)
	}
	var vulns []vulnMeta
	read("index/vulns.json", &vulns)
	if len(vulns) != 2 || vulns[0].ID != "GO-2026-0001" || vulns[0].Aliases[0] != "CVE-2026-1" {
		t.Errorf("vulns.json = %+v", vulns)
	}
	for id, r := range reports {
		if b, err := os.ReadFile(filepath.Join(out, "ID", id+".json")); err != nil || string(b) != r {
			t.Errorf("ID/%s.json is not the report unchanged (%v)", id, err)
		}
	}
	if _, err := buildDB(t.TempDir(), out, at); err == nil {
		t.Error("buildDB of a directory without reports succeeded")
	}
}

func TestReportFailsOnlyOnALinkedModuleSymbol(t *testing.T) {
	v := func(module, fixed string, symbols ...string) *vuln {
		s := map[string]bool{}
		for _, sym := range symbols {
			s[sym] = true
		}
		return &vuln{Module: module, Version: "v0.60.0", Fixed: fixed, Symbols: s, Binaries: map[string]bool{"ipledger-ipam": true}}
	}
	for _, tc := range []struct {
		name     string
		vuln     *vuln
		wantFail bool
		want     string
	}{
		{"standard library", v("stdlib", "v1.26.9", "net/http.Serve"), false, "STDLIB GO-1 in go1.26.8, fixed in go1.26.9"},
		{"module, symbol linked", v("golang.org/x/net", "v0.62.0", "golang.org/x/net/html.Parse"), true, "FAIL GO-1 in golang.org/x/net@v0.60.0, fixed in v0.62.0"},
		{"module, no symbol linked", v("golang.org/x/net", "v0.62.0"), false, "not linked in (not reachable): GO-1 (golang.org/x/net@v0.60.0)"},
	} {
		tc.vuln.ID = "GO-1"
		var w bytes.Buffer
		if failed := report(&w, map[string]*vuln{"GO-1": tc.vuln}, "go1.26.8", 5); failed != tc.wantFail {
			t.Errorf("%s: report failed = %v, want %v", tc.name, failed, tc.wantFail)
		}
		if !strings.Contains(w.String(), tc.want) {
			t.Errorf("%s: report says\n%s\nwant it to contain %q", tc.name, w.String(), tc.want)
		}
	}
}
