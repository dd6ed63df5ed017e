package docblock

import (
	"reflect"
	"testing"
)

func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		name, md, marker string
		want             [][]string
		err              bool
	}{
		{
			name:   "continued lines, comments and blanks",
			md:     "x\nremove it:\n\n  ```sh\n  # first\n  kubectl delete a \\\n    b\n\n  kubectl get c\n  ```\n```sh\nlater\n```",
			marker: "remove it",
			want:   [][]string{{"kubectl", "delete", "a", "b"}, {"kubectl", "get", "c"}},
		},
		{name: "the first block after the marker", md: "```sh\nbefore\n```\nM\n```sh\nafter\n```", marker: "M", want: [][]string{{"after"}}},
		{name: "no marker", md: "```sh\na\n```", marker: "M", err: true},
		{name: "no block", md: "M\ntext", marker: "M", err: true},
		{name: "not closed", md: "M\n```sh\na\n", marker: "M", err: true},
		{name: "ends continued", md: "M\n```sh\na \\\n```", marker: "M", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Commands(tc.md, tc.marker)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want an error: %v", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
