package stream

import (
	"testing"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func withUID(o *watcherv1.Object, uid string) *watcherv1.Object {
	o.Meta.Uid = uid
	return o
}

func TestNewerVersion(t *testing.T) {
	tests := []struct{ a, b, want string }{
		{"", "5", "5"},
		{"5", "", "5"},
		{"5", "7", "7"},
		{"7", "5", "7"},
		{"9", "10", "10"}, // numbers, not strings
		{"10", "9", "10"},
		{"5", "x", "5"}, // not a version: never wins
		{"x", "5", "5"},
		{"5", "05", "5"},
	}
	for _, tt := range tests {
		if got := newerVersion(tt.a, tt.b); got != tt.want {
			t.Errorf("newerVersion(%q, %q) = %q, want %q", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestJudgeUpsert(t *testing.T) {
	tests := []struct {
		name string
		held *watcherv1.Object
		tomb string
		o    *watcherv1.Object
		want verdict
	}{
		{name: "new object", o: svc("a", "x", "5", nil), want: apply},
		{name: "newer version", held: svc("a", "x", "5", nil), o: svc("a", "x", "6", nil), want: apply},
		{name: "same version (a snapshot repeating it)", held: svc("a", "x", "5", nil), o: svc("a", "x", "5", nil), want: apply},
		{name: "older version (a replica behind)", held: svc("a", "x", "10", nil), o: svc("a", "x", "9", nil), want: drop},
		{name: "an older incarnation under the same name", held: withUID(svc("a", "x", "20", nil), "u2"),
			o: withUID(svc("a", "x", "12", nil), "u1"), want: drop},
		{name: "a newer incarnation under the same name", held: withUID(svc("a", "x", "12", nil), "u1"),
			o: withUID(svc("a", "x", "20", nil), "u2"), want: apply},
		{name: "versions that are not integers are not ordered", held: svc("a", "x", "b", nil), o: svc("a", "x", "a", nil), want: apply},
		{name: "deleted at this version (a replica behind brings it back)", tomb: "7", o: svc("a", "x", "7", nil), want: drop},
		{name: "deleted at a newer version", tomb: "7", o: svc("a", "x", "6", nil), want: drop},
		{name: "recreated after the deletion", tomb: "7", o: svc("a", "x", "8", nil), want: apply},
		{name: "tombstone and a version that is not an integer", tomb: "7", o: svc("a", "x", "", nil), want: apply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judgeUpsert(tt.held, tt.tomb, tt.o); got != tt.want {
				t.Errorf("judgeUpsert = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestJudgeDelete(t *testing.T) {
	tests := []struct {
		name       string
		held, last *watcherv1.Object
		want       verdict
	}{
		{name: "nothing held", last: svc("a", "x", "5", nil), want: drop},
		{name: "the state the client holds", held: svc("a", "x", "5", nil), last: svc("a", "x", "5", nil), want: apply},
		{name: "a state newer than held (the client missed an update)", held: svc("a", "x", "5", nil), last: svc("a", "x", "8", nil), want: apply},
		{name: "a state older than held: the replica never saw what the client holds", held: svc("a", "x", "9", nil),
			last: svc("a", "x", "5", nil), want: holdBack},
		{name: "an older incarnation", held: withUID(svc("a", "x", "20", nil), "u2"),
			last: withUID(svc("a", "x", "12", nil), "u1"), want: holdBack},
		{name: "versions that are not integers", held: svc("a", "x", "9", nil), last: svc("a", "x", "", nil), want: apply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judgeDelete(tt.held, tt.last); got != tt.want {
				t.Errorf("judgeDelete = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestJudgeAbsence(t *testing.T) {
	tests := []struct {
		name           string
		held, progress string
		want           verdict
	}{
		{name: "the replica showed a newer version of the kind", held: "5", progress: "9", want: apply},
		{name: "the replica showed exactly the held version's revision", held: "5", progress: "5", want: apply},
		{name: "the replica showed only older versions", held: "9", progress: "5", want: holdBack},
		{name: "the replica showed nothing of the kind", held: "9", progress: "", want: holdBack},
		{name: "held version not an integer", held: "x", progress: "5", want: apply},
		{name: "held version empty", held: "", progress: "", want: apply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judgeAbsence(tt.held, tt.progress); got != tt.want {
				t.Errorf("judgeAbsence(%q, %q) = %v, want %v", tt.held, tt.progress, got, tt.want)
			}
		})
	}
}
