package cmdmain

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/pkg/version"
)

func TestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Common
		wantErr bool
	}{
		{"defaults", nil, Common{LogLevel: "info", LogFormat: "json", Namespace: "ipledger-system", KubeAPIQPS: 50, KubeAPIBurst: 100}, false},
		{"all", []string{"--kubeconfig=/k", "--log-level=debug", "--log-format=text", "--namespace=x", "--kube-api-qps=7.5", "--kube-api-burst=9"},
			Common{Kubeconfig: "/k", LogLevel: "debug", LogFormat: "text", Namespace: "x", KubeAPIQPS: 7.5, KubeAPIBurst: 9}, false},
		{"bad level", []string{"--log-level=loud"}, Common{}, true},
		{"bad format", []string{"--log-format=xml"}, Common{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			var c Common
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.Flags(fs)
			err := fs.Parse(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse error = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && (c.Kubeconfig != tt.want.Kubeconfig || c.LogLevel != tt.want.LogLevel ||
				c.LogFormat != tt.want.LogFormat || c.Namespace != tt.want.Namespace ||
				c.KubeAPIQPS != tt.want.KubeAPIQPS || c.KubeAPIBurst != tt.want.KubeAPIBurst) {
				t.Errorf("got %+v, want %+v", c, tt.want)
			}
		})
	}
}

func TestPresetRateLimitsBecomeFlagDefaults(t *testing.T) {
	t.Setenv("KUBECONFIG", "/k")
	c := Common{KubeAPIQPS: 2000, KubeAPIBurst: 4000}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.Flags(fs)
	if got := fs.Lookup("kube-api-qps").DefValue; got != "2000" {
		t.Errorf("--kube-api-qps default %s, want 2000", got)
	}
	if got := fs.Lookup("kube-api-burst").DefValue; got != "4000" {
		t.Errorf("--kube-api-burst default %s, want 4000", got)
	}
	if err := fs.Parse([]string{"--kube-api-burst=5"}); err != nil {
		t.Fatal(err)
	}
	if c.KubeAPIQPS != 2000 || c.KubeAPIBurst != 5 {
		t.Errorf("got qps %v burst %d, want 2000 and 5", c.KubeAPIQPS, c.KubeAPIBurst)
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, "warn", "json")
	log.Info("Hidden")
	log.Warn("Shown", "pool", "a")
	if strings.Contains(buf.String(), "Hidden") || !strings.Contains(buf.String(), `"pool":"a"`) {
		t.Fatalf("log output %q", buf.String())
	}
}

func TestMainExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		run  error
		want int
	}{
		{"ok", nil, nil, 0},
		{"run fails", nil, errors.New("boom"), 1},
		{"bad flag", []string{"--nope"}, nil, 2},
		{"stray argument", []string{"extra"}, nil, 2},
		{"help", []string{"-h"}, nil, 0},
		{"version, run not called", []string{"--version"}, errors.New("run was called"), 0},
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			got := main("x", fs, tt.args, io.Discard, func(ctx context.Context) error { return tt.run })
			if got != tt.want {
				t.Errorf("exit code = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestVersionFlag: --version prints the binary, its release and revision on
// stdout, and the process logger's first line carries them too.
func TestVersionFlag(t *testing.T) {
	fs := flag.NewFlagSet("ipledger-x", flag.ContinueOnError)
	var out bytes.Buffer
	if code := main("ipledger-x", fs, []string{"--version"}, &out, func(context.Context) error { return nil }); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	v := version.Get()
	if want := "ipledger-x " + v.String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}
