package reference

import (
	"fmt"
	"strings"
)

// Flag is one flag of a Go flag.FlagSet, as its usage message prints it.
type Flag struct {
	Name, Type, Default, Usage string
}

// ParseGoFlags reads the flag list flag.PrintDefaults writes ("  -name
// type" then the usage on lines indented with a tab, ending in "(default
// v)"); the lines before the first flag are skipped. A flag without a
// type is a bool.
func ParseGoFlags(help string) ([]Flag, error) {
	var out []Flag
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			name, typ, _ := strings.Cut(strings.TrimPrefix(line, "  -"), " ")
			if typ == "" {
				typ = "bool"
			}
			out = append(out, Flag{Name: name, Type: typ})
		case strings.HasPrefix(line, "    \t"):
			if len(out) == 0 {
				return nil, fmt.Errorf("usage line before any flag: %q", line)
			}
			f := &out[len(out)-1]
			f.Usage = strings.TrimSpace(f.Usage + " " + strings.TrimSpace(line))
		}
	}
	for i := range out {
		f := &out[i]
		if u, def, ok := cutLast(f.Usage, " (default "); ok && strings.HasSuffix(def, ")") {
			f.Usage, f.Default = u, strings.TrimSuffix(def, ")")
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no flag found in %q", help)
	}
	return out, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// FlagTable is the markdown table of a Go binary's flags.
func FlagTable(flags []Flag) string {
	var b strings.Builder
	b.WriteString("| flag | type | default | description |\n|---|---|---|---|\n")
	for _, f := range flags {
		def := ""
		if f.Default != "" {
			def = "`" + cell(f.Default) + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.Name, f.Type, def, cell(f.Usage))
	}
	return b.String()
}

// CobraSection is the block of a cobra --help output under title (such as
// "Flags:" or "Available Commands:"), up to the next blank line; empty
// when there is none.
func CobraSection(help, title string) string {
	_, rest, ok := strings.Cut(help, "\n"+title+"\n")
	if !ok {
		return ""
	}
	block, _, _ := strings.Cut(rest, "\n\n")
	return strings.TrimRight(block, "\n")
}

// Subcommand is a command listed under "Available Commands:".
type Subcommand struct{ Name, Short string }

// CobraSubcommands are the commands a cobra --help lists, without cobra's
// own help and completion.
func CobraSubcommands(help string) []Subcommand {
	var out []Subcommand
	for _, line := range strings.Split(CobraSection(help, "Available Commands:"), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] == "help" || fields[0] == "completion" {
			continue
		}
		out = append(out, Subcommand{Name: fields[0], Short: strings.Join(fields[1:], " ")})
	}
	return out
}
