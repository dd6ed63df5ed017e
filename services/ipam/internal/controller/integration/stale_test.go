package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// pidOf finds the process this test started with a unique argument.
func pidOf(t *testing.T, uniqueArg string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte("\x00"+uniqueArg+"\x00")) && bytes.Contains(cmdline, []byte("ipledger-ipam")) {
			return pid
		}
	}
	t.Fatalf("no process with argument %q", uniqueArg)
	return 0
}

// A leader paused (SIGSTOP) while another takes the Lease over cannot write
// the ledger or a status when it resumes: the new term fenced the ledger, so
// its compare-and-swap fails, and it commits before it writes any status.
func TestPausedLeaderCannotWrite(t *testing.T) {
	h := newHarness(t)
	env := h.env
	b := make([]byte, 4)
	rand.Read(b)
	suffix := hex.EncodeToString(b)
	start := func(id string) *testenv.Process {
		return testenv.StartProcess(t, id, env.Binary(t, "ipam"), nil,
			"--kubeconfig", env.CP.KubeconfigPath, "--namespace", h.ledgerNS, "--lb-class", h.class, "--log-format", "text",
			"--watcher-addr", h.addr, "--watcher-token-file", h.tok, "--watcher-plaintext",
			"--grpc-addr", testenv.FreeAddr(t), "--grpc-plaintext", "--ops-addr", testenv.FreeAddr(t),
			"--leader-elect-identity", id, "--leader-elect-lease-name", h.lease,
			"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms")
	}
	h.pool("tstale", "10.77.10.0/24")
	h.watchDuplicates()
	want := map[string]string{}
	for i := range 10 {
		h.service(fmt.Sprintf("old%d", i), nil)
		want[fmt.Sprintf("old%d", i)] = fmt.Sprintf("10.77.10.%d", i)
	}
	aID := "ipam-a-" + suffix
	a := start(aID)
	h.expect(wait, want)

	pid := pidOf(t, aID)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	bID := "ipam-b-" + suffix
	start(bID)
	testenv.Eventually(t, wait, func() error {
		if term := h.ledgerTerm(); !strings.HasPrefix(term, bID+"/") {
			return fmt.Errorf("ledger term %q", term)
		}
		return nil
	})
	// While a sleeps, b allocates to new Services: a's view is now stale.
	for i := range 10 {
		h.service(fmt.Sprintf("new%d", i), nil)
		want[fmt.Sprintf("new%d", i)] = fmt.Sprintf("10.77.10.%d", 10+i)
	}
	h.expect(wait, want)

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// a notices it lost the Lease (or is fenced) and stops its term.
	testenv.Eventually(t, wait, func() error {
		logs := a.Logs()
		if strings.Contains(logs, "Stopped leading") || strings.Contains(logs, "A newer term fenced the ledger") {
			return nil
		}
		return fmt.Errorf("paused leader has not stopped its term yet")
	})
	if strings.Contains(a.Logs(), "A newer term fenced the ledger") {
		t.Logf("the resumed leader tried to write and was fenced")
	}
	h.expect(wait, want)
	st, err := ledger.Read(context.Background(), env.Client, h.ledgerNS)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Allocations) != 20 {
		t.Fatalf("ledger holds %d allocations, want 20", len(st.Allocations))
	}
	for _, al := range st.Allocations {
		if want[al.Service.Name] != al.IP.String() {
			t.Errorf("ledger %s=%s, status says %s", al.Service.Name, al.IP, want[al.Service.Name])
		}
	}
	if term := h.ledgerTerm(); !strings.HasPrefix(term, bID+"/") {
		t.Errorf("ledger term %q: the paused leader wrote after b fenced it", term)
	}
}
