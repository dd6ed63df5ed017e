package server

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

const shrinkBig = "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: big}\nspec: {addresses: [10.0.0.0/28]}\n"

// PreviewPool answers from the replica's stream: 20 Services hold
// 10.0.0.0-19 of pool big; shrinking it to /28 holds 4 outside it.
func TestPreviewPool(t *testing.T) {
	srv := newWorld(t, allocatedWorld(20, 0)...).server()
	ctx := context.Background()
	resp, err := srv.PreviewPool(ctx, &ipamv1.PreviewPoolRequest{Manifest: []byte(shrinkBig)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetHeldOutside()); n != 4 || resp.GetChange() != "Update" || resp.GetPools()[0].GetHeldOutsideAfter() != 4 {
		t.Errorf("change %s, %d held outside, pools %v; want Update, 4 held outside", resp.GetChange(), n, resp.GetPools())
	}

	for _, tc := range []struct {
		req  *ipamv1.PreviewPoolRequest
		code codes.Code
		want string
	}{
		{&ipamv1.PreviewPoolRequest{}, codes.InvalidArgument, "manifest: empty"},
		{&ipamv1.PreviewPoolRequest{Manifest: []byte("kind: Service\napiVersion: v1\nmetadata: {name: x}\n")}, codes.InvalidArgument, `manifest: the document is apiVersion "v1" kind "Service"`},
		{&ipamv1.PreviewPoolRequest{Manifest: []byte("apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: gone}\n"), Delete: true}, codes.NotFound, `IPPool "gone" does not exist`},
	} {
		_, err := srv.PreviewPool(ctx, tc.req)
		if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("PreviewPool(%q, delete %v) = %v, want %s saying %q", tc.req.GetManifest(), tc.req.GetDelete(), err, tc.code, tc.want)
		}
	}
}

// BenchmarkPreviewPool previews shrinking the pool of IPLEDGER_BENCH_N
// (default 10,000) allocated Services, with 100 pending: one op is one
// preview (a rebuild of the allocator and a decision for every Service).
func BenchmarkPreviewPool(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("IPLEDGER_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	srv := newWorld(b, allocatedWorld(n, 100)...).server()
	req := &ipamv1.PreviewPoolRequest{Manifest: []byte(shrinkBig)}
	for b.Loop() {
		if _, err := srv.PreviewPool(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
