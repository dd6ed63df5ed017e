package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// The messages of `govulncheck -format json` this check reads
// (golang.org/x/vuln/internal/govulncheck).
type (
	message struct {
		Config *struct {
			GoVersion string `json:"go_version"`
		} `json:"config"`
		OSV     *struct{ ID, Summary string } `json:"osv"`
		Finding *finding                      `json:"finding"`
	}
	finding struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	}
	frame struct {
		Module, Version, Package, Function, Receiver string
	}
)

// A vuln is one report found in one or more binaries.
type vuln struct {
	ID, Summary    string
	Module         string // "stdlib" for Go's standard library
	Version, Fixed string
	// Symbols are the vulnerable functions linked into a binary: empty
	// when a binary holds the module (or package) but none of them.
	Symbols  map[string]bool
	Binaries map[string]bool
}

func (v *vuln) reachable() bool { return len(v.Symbols) > 0 }
func (v *vuln) inGo() bool      { return v.Module == "stdlib" || v.Module == "toolchain" }

// scan runs govulncheck in binary mode over each binary against the
// database in db and merges the findings by report.
func scan(govulncheck, db string, binaries []string) (map[string]*vuln, string, error) {
	vulns := map[string]*vuln{}
	var goVersion string
	for _, bin := range binaries {
		// govulncheck's config message leaves go_version empty in binary
		// mode: the release that built the binary is in its build info.
		bi, err := buildinfo.ReadFile(bin)
		if err != nil {
			return nil, "", err
		}
		if goVersion == "" {
			goVersion = bi.GoVersion
		} else if goVersion != bi.GoVersion {
			goVersion += ", " + bi.GoVersion
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(govulncheck, "-mode", "binary", "-db", "file://"+db, "-format", "json", bin)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, "", fmt.Errorf("govulncheck %s: %w\n%s", bin, err, stderr.Bytes())
		}
		summaries := map[string]string{}
		dec := json.NewDecoder(&stdout)
		for {
			var m message
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, "", fmt.Errorf("govulncheck %s: %w", bin, err)
			}
			switch {
			case m.OSV != nil:
				summaries[m.OSV.ID] = m.OSV.Summary
			case m.Finding != nil && len(m.Finding.Trace) > 0:
				f, top := m.Finding, m.Finding.Trace[0]
				v := vulns[f.OSV]
				if v == nil {
					v = &vuln{ID: f.OSV, Module: top.Module, Version: top.Version, Fixed: f.FixedVersion,
						Symbols: map[string]bool{}, Binaries: map[string]bool{}}
					vulns[f.OSV] = v
				}
				v.Summary = summaries[f.OSV]
				v.Binaries[filepath.Base(bin)] = true
				if top.Function != "" {
					sym := top.Function
					if top.Receiver != "" {
						sym = strings.TrimPrefix(top.Receiver, "*") + "." + sym
					}
					v.Symbols[top.Package+"."+sym] = true
				}
			}
		}
	}
	return vulns, goVersion, nil
}

// report writes what scan found, reachable reports first, and says whether
// the check fails: a vulnerable symbol of a module (not of Go's standard
// library) linked into a binary. One of the standard library is reported
// with the Go release that fixes it; the binaries are rebuilt with that
// release when the toolchain is bumped (docs/security.md, "Supply chain").
func report(w io.Writer, vulns map[string]*vuln, goVersion string, binaries int) (failed bool) {
	ids := make([]string, 0, len(vulns))
	for id := range vulns {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var notLinked []string
	var inGo, inModules int
	for _, id := range ids {
		v := vulns[id]
		if !v.reachable() {
			notLinked = append(notLinked, fmt.Sprintf("%s (%s@%s)", id, v.Module, v.Version))
			continue
		}
		where := fmt.Sprintf("%s\n    in %s; linked in: %s", v.Summary, keys(v.Binaries, ", "), symbols(v.Symbols, 4))
		if v.inGo() {
			inGo++
			fix := "no fixed release yet"
			if v.Fixed != "" {
				fix = "fixed in go" + strings.TrimPrefix(v.Fixed, "v")
			}
			fmt.Fprintf(w, "vulncheck: STDLIB %s in %s, %s (does not fail the check; the toolchain policy: docs/security.md, \"Supply chain\"): %s\n",
				id, goVersion, fix, where)
			continue
		}
		inModules++
		failed = true
		fix := "no fixed version yet"
		if v.Fixed != "" {
			fix = "fixed in " + v.Fixed
		}
		fmt.Fprintf(w, "vulncheck: FAIL %s in %s@%s, %s: %s\n", id, v.Module, v.Version, fix, where)
	}
	if len(notLinked) > 0 {
		fmt.Fprintf(w, "vulncheck: %d reports of modules or packages the binaries hold whose vulnerable symbols are not linked in (not reachable): %s\n",
			len(notLinked), strings.Join(notLinked, ", "))
	}
	fmt.Fprintf(w, "vulncheck: %d binaries (%s): %d reachable vulnerabilities in modules, %d in the standard library\n",
		binaries, goVersion, inModules, inGo)
	return failed
}

// symbols names the first n vulnerable symbols and counts the rest: a
// report of net/http lists hundreds.
func symbols(m map[string]bool, n int) string {
	s := strings.Split(keys(m, "\x00"), "\x00")
	if len(s) <= n {
		return strings.Join(s, " ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(s[:n], " "), len(s)-n)
}

func keys(m map[string]bool, sep string) string {
	s := make([]string, 0, len(m))
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return strings.Join(s, sep)
}
