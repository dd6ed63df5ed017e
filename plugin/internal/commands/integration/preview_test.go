package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/plugin/internal/commands"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// TestPreviewCommand runs `kubectl ipledger preview` against the real ipam
// (a standby answers: previews need no leader), as a viewer.
func TestPreviewCommand(t *testing.T) {
	s := startSystem(t)
	read := func(args ...string) []string {
		return append(args, "--ipam-address", s.standby, "--service-account", s.viewer, "--kubeconfig", s.admin)
	}
	shrink := filepath.Join(t.TempDir(), "shrink.yaml")
	if err := os.WriteFile(shrink, []byte("apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata:\n  name: "+pool+
		"\nspec:\n  addresses: [10.91.0.0/31]\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The ledger keeps the addresses of Services that earlier tests of this
	// package left behind (no namespace controller deletes them): count
	// what is used rather than assume the pool holds only this test's four.
	var used int
	t.Run("shrinking the pool, in words", func(t *testing.T) {
		// The standby answers from its stream, which may not show the last
		// status writes yet: ask until every address in use is a Service's.
		var out string
		testenv.Eventually(t, wait, func() error {
			out = s.ok(t, read("preview", "-f", shrink)...)
			row := regexp.MustCompile(`(?m)^` + pool + `\s+Serving\s+(\d)/8 -> 2/2\s+-\s+0 -> (\d)$`).FindStringSubmatch(out)
			if row == nil {
				return fmt.Errorf("no pool row %q in:\n%s", pool+" Serving N/8 -> 2/2 - 0 -> N-2", out)
			}
			used, _ = strconv.Atoi(row[1])
			if held, _ := strconv.Atoi(row[2]); used < 4 || held != used-2 {
				return fmt.Errorf("pool row %q: %d used, %d held outside after; want at least 4, and 2 fewer held outside", row[0], used, held)
			}
			if n := len(regexp.MustCompile(`(?m)^\S+\s+held outside\s+10\.91\.0\.[2-7]\s+Allocated -> HeldOutsidePool\s+`+pool+`$`).FindAllString(out, -1)); n != used-2 {
				return fmt.Errorf("%d Service rows held outside, want %d:\n%s", n, used-2, out)
			}
			return nil
		})
		t.Logf("kubectl ipledger preview -f shrink.yaml:\n%s", out)
		wantAll(t, "preview", out, "Pool:  "+pool+" (Update)", "would keep their addresses outside their pool (HeldOutsidePool; nothing is moved)")
	})

	t.Run("shrinking the pool, as JSON", func(t *testing.T) {
		var resp ipamv1.PreviewPoolResponse
		if err := protojson.Unmarshal([]byte(s.ok(t, read("preview", "-f", shrink, "-o", "json")...)), &resp); err != nil {
			t.Fatal(err)
		}
		var held []string
		for _, h := range resp.GetHeldOutside() {
			held = append(held, h.GetIpsAfter()...)
		}
		if len(held) != used-2 || slices.Contains(held, "10.91.0.0") || slices.Contains(held, "10.91.0.1") || resp.GetPools()[0].GetHeldOutsideAfter() != int64(used-2) {
			t.Errorf("held outside %v, pool %v; want the %d addresses outside 10.91.0.0/31", held, resp.GetPools(), used-2)
		}
	})

	t.Run("a refused manifest from stdin exits 1 naming the field", func(t *testing.T) {
		var out, errOut bytes.Buffer
		root := commands.NewRoot(genericiooptions.IOStreams{Out: &out, ErrOut: &errOut,
			In: strings.NewReader("apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: " + pool + "}\nspec: {addresses: [10.91.0.20-10.91.0.10]}\n")})
		root.SetArgs(read("preview", "-f", "-"))
		err := root.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), "the API server would refuse IPPool "+pool) {
			t.Errorf("err = %v, want the refusal", err)
		}
		wantAll(t, "preview", out.String(), "Refused:", `spec.addresses[0] "10.91.0.20-10.91.0.10": range starts after it ends; write it as 10.91.0.10-10.91.0.20`)
	})

	t.Run("deleting the pool", func(t *testing.T) {
		out := s.ok(t, read("preview", "-f", shrink, "--delete", "-o", "yaml")...)
		wantAll(t, "preview", out, "change: Delete", "stateAfter: Terminating")
		var resp ipamv1.PreviewPoolResponse
		if err := protojson.Unmarshal([]byte(s.ok(t, read("preview", "-f", shrink, "--delete", "-o", "json")...)), &resp); err != nil {
			t.Fatal(err)
		}
		wantAll(t, "summary", strings.Join(resp.GetSummary(), "\n"), fmt.Sprintf("while %d Services hold its addresses", used))
	})

	t.Run("without permission", func(t *testing.T) {
		msg := s.fails(t, "preview", "-f", shrink, "--ipam-address", s.standby, "--service-account", s.nobody)
		wantAll(t, "error", msg, "no permission", "ipledger:viewer")
	})

	// Nothing was written: the pool is as created.
	p, err := s.env.Dynamic.Resource(poolGVR).Get(context.Background(), pool, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if addrs, _, _ := unstructured.NestedStringSlice(p.Object, "spec", "addresses"); strings.Join(addrs, ",") != "10.91.0.0/29" || p.GetDeletionTimestamp() != nil {
		t.Errorf("the pool changed: addresses %v, deleted %v", addrs, p.GetDeletionTimestamp())
	}
}
