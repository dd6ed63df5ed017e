package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
)

// The ipam binary's gRPC API: reflection for grpcurl, and authorization per
// RPC (viewer reads, operator reserves, no token is refused).
func TestGRPCBinaryAuthz(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	env := h.env
	h.pool("tgrpc-one", "10.77.9.0/30")
	h.service("a", nil)

	grpcAddr := testenv.FreeAddr(t)
	testenv.StartProcess(t, "ipam", env.Binary(t, "ipam"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--namespace", h.ledgerNS, "--lb-class", h.class, "--log-format", "text",
		"--watcher-addr", h.addr, "--watcher-token-file", h.tok, "--watcher-plaintext",
		"--grpc-addr", grpcAddr, "--grpc-plaintext", "--ops-addr", testenv.FreeAddr(t),
		"--leader-elect-identity", "ipam-grpc", "--leader-elect-lease-name", h.lease)
	h.expect(wait, map[string]string{"a": "10.77.9.0"})

	token := func(role string) string {
		name := "grpc-" + strings.TrimPrefix(role, "ipledger:")
		tok, err := env.GRPCToken(ctx, h.ns, name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = env.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: h.ns + "-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: h.ns}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	viewer, operator := token("ipledger:viewer"), token("ipledger:operator")

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := ipamv1grpc.NewIPAMServiceClient(conn)
	as := func(tok string) context.Context {
		if tok == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}

	_, err = c.ListPools(as(""), &ipamv1.ListPoolsRequest{})
	wantCode(t, err, codes.Unauthenticated, "token")
	testenv.Eventually(t, wait, func() error {
		resp, err := c.ListAllocations(as(viewer), &ipamv1.ListAllocationsRequest{Namespace: h.ns})
		if err != nil {
			return err
		}
		if len(resp.Allocations) != 1 || resp.Allocations[0].Ip != "10.77.9.0" {
			return fmt.Errorf("allocations %v", resp.Allocations)
		}
		return nil
	})
	_, err = c.ReserveAddress(as(viewer), &ipamv1.ReserveAddressRequest{Ip: "10.77.9.3", OwnerNote: "x"})
	wantCode(t, err, codes.PermissionDenied, "")
	r, err := c.ReserveAddress(as(operator), &ipamv1.ReserveAddressRequest{Ip: "10.77.9.3", OwnerNote: "lab"})
	if err != nil || r.Reservation.Ip != "10.77.9.3" {
		t.Fatalf("ReserveAddress as operator: %v, %v", r, err)
	}
	_, err = c.ReleaseReservation(as(operator), &ipamv1.ReleaseReservationRequest{Ip: "10.77.9.300"})
	wantCode(t, err, codes.InvalidArgument, "ip")

	// grpcurl with reflection, no proto files.
	out, err := exec.Command(filepath.Join(env.CP.BinDir, "grpcurl"), "-plaintext", grpcAddr, "list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ipledger.ipam.v1.IPAMService") {
		t.Fatalf("grpcurl list: %v\n%s", err, out)
	}
	out, err = exec.Command(filepath.Join(env.CP.BinDir, "grpcurl"), "-plaintext", "-H", "authorization: Bearer "+viewer,
		"-d", fmt.Sprintf(`{"service":{"namespace":%q,"name":"a"}}`, h.ns), grpcAddr, "ipledger.ipam.v1.IPAMService/ExplainService").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "10.77.9.0") {
		t.Fatalf("grpcurl ExplainService: %v\n%s", err, out)
	}

	// PreviewPool as a viewer, the manifest sent as services/ipam/README.md shows.
	dir := t.TempDir()
	manifest := "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata:\n  name: tgrpc-one\nspec:\n  addresses: [10.77.9.2/31]\n"
	if err := os.WriteFile(filepath.Join(dir, "pool.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("bash", "-c", `grpcurl -plaintext -H "authorization: Bearer $TOKEN" -d "{\"manifest\":\"$(base64 < pool.yaml | tr -d '\n')\"}" \
  $IPAM ipledger.ipam.v1.IPAMService/PreviewPool`)
	sh.Dir, sh.Env = dir, append(os.Environ(), "PATH="+env.CP.BinDir+":"+os.Getenv("PATH"), "TOKEN="+viewer, "IPAM="+grpcAddr)
	out, err = sh.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"reasonAfter": "HeldOutsidePool"`) || !strings.Contains(string(out), `"heldOutsideAfter": "1"`) {
		t.Fatalf("grpcurl PreviewPool: %v\n%s", err, out)
	}
}
