package reference

import "testing"

func TestParseGoFlags(t *testing.T) {
	help := "Usage of x:\n  -addr string\n    \tlisten address (default \":8443\")\n  -plain\n    \tno TLS\n  -d duration\n    \ta wait,\n    \ton two lines (default 10s)\n"
	got, err := ParseGoFlags(help)
	if err != nil {
		t.Fatal(err)
	}
	want := []Flag{
		{Name: "addr", Type: "string", Default: `":8443"`, Usage: "listen address"},
		{Name: "plain", Type: "bool", Usage: "no TLS"},
		{Name: "d", Type: "duration", Default: "10s", Usage: "a wait, on two lines"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("flag %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
