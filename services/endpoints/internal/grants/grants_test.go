package grants

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		addr        string
		says        string // "" when granted
	}{
		{"no annotation", nil, "10.1.0.5", "granted no addresses"},
		{"in a range", map[string]string{Annotation: "10.1.0.0/16, 192.0.2.7"}, "10.1.200.5", ""},
		{"a single address", map[string]string{Annotation: "10.1.0.0/16,192.0.2.7"}, "192.0.2.7", ""},
		{"the next address", map[string]string{Annotation: "10.1.0.0/16,192.0.2.7"}, "192.0.2.8", "outside the addresses granted to namespace team-a"},
		{"IPv6", map[string]string{Annotation: "2001:db8:1::/48"}, "2001:db8:1::9", ""},
		{"IPv4-mapped", map[string]string{Annotation: "10.1.0.0/16"}, "::ffff:10.1.0.1", ""},
		{"host bits are masked", map[string]string{Annotation: "10.1.0.1/16"}, "10.1.9.9", ""},
		{"malformed", map[string]string{Annotation: "10.1.0.0/16,nonsense"}, "10.1.0.5", `"nonsense" is not a CIDR`},
		{"empty grants nothing", map[string]string{Annotation: ""}, "10.1.0.5", "outside"},
	} {
		got := Check("team-a", tc.annotations, netip.MustParseAddr(tc.addr))
		if (got == "") != (tc.says == "") || !strings.Contains(got, tc.says) {
			t.Errorf("%s: Check(%s) = %q, want %q", tc.name, tc.addr, got, tc.says)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"off", "report", "enforce"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseMode("on"); err == nil || !strings.Contains(err.Error(), "--workload-grants") {
		t.Errorf("ParseMode(on) = %v, want an error naming the flag", err)
	}
}

func TestZeroModeIsOff(t *testing.T) {
	var zero Mode
	if zero.Checks() || Off.Checks() || !Report.Checks() || !Enforce.Checks() {
		t.Error("only report and enforce check grants; the zero Mode is off")
	}
}
