// Command vulncheck is the harness of `make vulncheck` (hack/vulncheck.sh):
//
//	vulncheck db -osv DIR -out DIR -time RFC3339
//
// writes a govulncheck database (index/db.json, index/modules.json,
// index/vulns.json, ID/<id>.json) from the OSV reports of the
// golang.org/x/vulndb module, which carries no index; and
//
//	vulncheck scan -govulncheck BIN -db DIR BINARY...
//
// runs govulncheck in binary mode over each binary against it, offline,
// reports every finding and exits 1 when a binary links a vulnerable
// symbol of a module; one of Go's standard library is reported with the Go
// release that fixes it and does not fail the check.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: vulncheck db|scan [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	switch os.Args[1] {
	case "db":
		osvDir := fs.String("osv", "", "directory of OSV reports <ID>.json (golang.org/x/vulndb's data/osv)")
		out := fs.String("out", "", "directory to write the database to")
		at := fs.String("time", "", "RFC 3339 time of the vulndb version: the database's modified time when no report has a later one")
		fs.Parse(os.Args[2:])
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil || *osvDir == "" || *out == "" {
			fmt.Fprintln(os.Stderr, "vulncheck db: -osv, -out and -time (RFC 3339) are required")
			os.Exit(2)
		}
		n, err := buildDB(*osvDir, *out, t)
		if err != nil {
			fmt.Fprintln(os.Stderr, "vulncheck db:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "vulncheck: database of %d reports in %s\n", n, *out)
	case "scan":
		govulncheck := fs.String("govulncheck", "govulncheck", "the govulncheck binary")
		db := fs.String("db", "", "the database directory (vulncheck db)")
		fs.Parse(os.Args[2:])
		if *db == "" || fs.NArg() == 0 {
			fmt.Fprintln(os.Stderr, "vulncheck scan: -db and at least one binary are required")
			os.Exit(2)
		}
		vulns, goVersion, err := scan(*govulncheck, *db, fs.Args())
		if err != nil {
			fmt.Fprintln(os.Stderr, "vulncheck scan:", err)
			os.Exit(1)
		}
		if report(os.Stdout, vulns, goVersion, fs.NArg()) {
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "vulncheck: unknown command %q (db or scan)\n", os.Args[1])
		os.Exit(2)
	}
}
