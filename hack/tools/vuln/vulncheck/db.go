package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// entry is the part of an OSV report (https://ossf.github.io/osv-schema/)
// the index needs; the report itself is copied byte for byte.
type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
		Ranges []osvRange `json:"ranges,omitempty"`
	} `json:"affected"`
}

type osvRange struct {
	Type   string `json:"type"`
	Events []struct {
		Introduced string `json:"introduced,omitempty"`
		Fixed      string `json:"fixed,omitempty"`
	} `json:"events"`
}

// The index files of a v1 Go vulnerability database
// (https://go.dev/security/vuln/database#api), as golang.org/x/vuln's
// client reads them from a file:// source.
type (
	dbMeta struct {
		Modified time.Time `json:"modified"`
	}
	moduleMeta struct {
		Path  string       `json:"path"`
		Vulns []moduleVuln `json:"vulns"`
	}
	moduleVuln struct {
		ID       string    `json:"id"`
		Modified time.Time `json:"modified"`
		Fixed    string    `json:"fixed,omitempty"`
	}
	vulnMeta struct {
		ID       string    `json:"id"`
		Modified time.Time `json:"modified"`
		Aliases  []string  `json:"aliases,omitempty"`
	}
)

// buildDB writes the database of the OSV reports in osvDir (vulndb's
// data/osv/<ID>.json) into out: ID/<ID>.json, the reports unchanged, and
// index/db.json, index/modules.json and index/vulns.json. vulndb's reports
// carry a zero "modified" (its own tooling takes it from git history, which
// a module zip does not have): the database's modified time is then
// notBefore, the time of the vulndb version, so that govulncheck's "DB
// updated" line says how old the reports are.
func buildDB(osvDir, out string, notBefore time.Time) (int, error) {
	files, err := filepath.Glob(filepath.Join(osvDir, "*.json"))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("no OSV reports (*.json) in %s", osvDir)
	}
	for _, d := range []string{"ID", "index"} {
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			return 0, err
		}
	}
	db := dbMeta{Modified: notBefore.UTC()}
	modules := map[string]*moduleMeta{}
	var vulns []vulnMeta
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		var e entry
		if err := json.Unmarshal(b, &e); err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		if filepath.Base(f) != e.ID+".json" {
			return 0, fmt.Errorf("%s: the report's id is %q", f, e.ID)
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), b, 0o644); err != nil {
			return 0, err
		}
		if e.Modified.After(db.Modified) {
			db.Modified = e.Modified
		}
		vulns = append(vulns, vulnMeta{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		for _, a := range e.Affected {
			m := modules[a.Package.Name]
			if m == nil {
				m = &moduleMeta{Path: a.Package.Name}
				modules[a.Package.Name] = m
			}
			m.Vulns = append(m.Vulns, moduleVuln{ID: e.ID, Modified: e.Modified, Fixed: latestFix(a.Ranges)})
		}
	}
	mods := make([]*moduleMeta, 0, len(modules))
	for _, m := range modules {
		sort.SliceStable(m.Vulns, func(i, j int) bool { return m.Vulns[i].ID < m.Vulns[j].ID })
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	sort.Slice(vulns, func(i, j int) bool { return vulns[i].ID < vulns[j].ID })
	for name, v := range map[string]any{"db": db, "modules": mods, "vulns": vulns} {
		b, err := json.Marshal(v)
		if err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(out, "index", name+".json"), b, 0o644); err != nil {
			return 0, err
		}
	}
	return len(files), nil
}

// latestFix is the version that fixes a module's vulnerability for good:
// the highest "fixed" of its SEMVER ranges, or "" when the vulnerability
// was reintroduced after it. govulncheck skips a report for a module at or
// above this version without reading it, so it must be what
// golang.org/x/vuln computes (internal/semver.NonSupersededFix).
func latestFix(ranges []osvRange) string {
	var latest string
	for _, r := range ranges {
		if r.Type != "SEMVER" {
			continue
		}
		for _, e := range r.Events {
			if e.Fixed != "" && less(latest, e.Fixed) {
				latest = e.Fixed
			}
		}
		for _, e := range r.Events {
			if e.Introduced != "" && e.Introduced != "0" && less(latest, e.Introduced) {
				latest = ""
				break
			}
		}
	}
	return latest
}

// less compares OSV versions, which carry no "v" (Go's with or without
// "go").
func less(a, b string) bool {
	return semver.Compare(canonical(a), canonical(b)) < 0
}

func canonical(v string) string {
	return "v" + strings.TrimPrefix(strings.TrimPrefix(v, "v"), "go")
}
