// Package docblock reads the shell commands of a fenced block in a
// Markdown page, so that a test runs what the docs tell a user to run,
// word for word, instead of a copy that can drift from them.
package docblock

import (
	"fmt"
	"strings"
)

// Commands returns the commands of the first ```sh block after the first
// line of markdown containing marker, each split into words: a line ending
// in a backslash continues on the next, and blank lines and # comments are
// skipped. The words are split on spaces only (no quoting, no variables):
// a block that needs a shell is not one a test can replay this way.
func Commands(markdown, marker string) ([][]string, error) {
	lines := strings.Split(markdown, "\n")
	start := -1
	for i, l := range lines {
		if strings.Contains(l, marker) {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no line contains %q", marker)
	}
	var cmds [][]string
	in := false
	var cur string
	for _, l := range lines[start+1:] {
		t := strings.TrimSpace(l)
		switch {
		case !in && t == "```sh":
			in = true
		case in && t == "```":
			if cur != "" {
				return nil, fmt.Errorf("the block after %q ends inside a continued line", marker)
			}
			return cmds, nil
		case in && (t == "" || strings.HasPrefix(t, "#")) && cur == "":
		case in:
			cont := strings.HasSuffix(t, "\\")
			cur += " " + strings.TrimSuffix(t, "\\")
			if !cont {
				cmds = append(cmds, strings.Fields(cur))
				cur = ""
			}
		}
	}
	if in {
		return nil, fmt.Errorf("the block after %q is not closed", marker)
	}
	return nil, fmt.Errorf("no ```sh block after %q", marker)
}
