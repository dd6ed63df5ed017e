// Package controlplane runs a real etcd and kube-apiserver on loopback, built
// from the Go module proxy by hack/build-tools.sh. It is the Kubernetes that
// ipledger's tests and its local development environment talk to: Node and
// RBAC authorization with the NodeRestriction admission plugin (what a real
// cluster runs, so that a test acting as system:node:<name> meets the same
// fences a kubelet does), static-token, ServiceAccount and client-certificate
// authentication, the aggregation layer's front proxy (request-header
// authentication, certs.go), an audit log of ipledger's API groups
// (audit.go), dual-stack Service CIDRs, and no controller-manager.
package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// AdminToken is the static bearer token of the `admin` user (group
// system:masters). It exists only on this loopback control plane.
const AdminToken = "ipledger-local-admin"

// Options configure Start.
type Options struct {
	// Dir holds etcd data, keys, kubeconfig and logs. Required.
	Dir string
	// BinDir holds etcd and kube-apiserver; empty means ToolsBin().
	BinDir string
	// Logs receive the processes' output; nil writes to files in Dir.
	Logs func(name string) (*os.File, error)
	// KeepAlive, when true, does not tie the processes to the caller's
	// lifetime (for ipledger-dev, whose processes outlive the command).
	KeepAlive bool
}

// ControlPlane is a running etcd + kube-apiserver.
type ControlPlane struct {
	Dir            string
	BinDir         string
	APIServerURL   string
	KubeconfigPath string
	EtcdURL        string

	etcd, apiserver *exec.Cmd
	opts            Options
	apiserverArgs   []string
	clientCA        *Authority
}

// Start launches etcd and kube-apiserver and returns once /readyz answers.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.BinDir == "" {
		bin, err := ToolsBin()
		if err != nil {
			return nil, err
		}
		opts.BinDir = bin
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: opts.Dir, BinDir: opts.BinDir, opts: opts}
	if err := cp.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// RESTConfig returns an admin client configuration with rate limits raised
// for tests (client-go's default of 5 QPS would dominate every measurement).
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            cp.APIServerURL,
		BearerToken:     AdminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             1000,
		Burst:           2000,
	}
}

// TokenConfig returns a client configuration authenticating with token.
func (cp *ControlPlane) TokenConfig(token string) *rest.Config {
	cfg := cp.RESTConfig()
	cfg.BearerToken = token
	return cfg
}

// Stop kills both processes and waits for them.
func (cp *ControlPlane) Stop() {
	for _, cmd := range []*exec.Cmd{cp.apiserver, cp.etcd} {
		stopProcess(cmd)
	}
}

// EtcdPID is etcd's process ID.
func (cp *ControlPlane) EtcdPID() int { return cp.etcd.Process.Pid }

// APIServerPID is kube-apiserver's process ID.
func (cp *ControlPlane) APIServerPID() int { return cp.apiserver.Process.Pid }

// RestartAPIServer stops kube-apiserver and starts it again on the same port
// and etcd, as an API server upgrade or crash would.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	stopProcess(cp.apiserver)
	return cp.runAPIServer(ctx, cp.apiserverArgs)
}

func stopProcess(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	ports, err := FreePorts(2)
	if err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	cp.EtcdURL = client
	cmd, err := cp.launch("etcd", []string{
		"--name=default",
		"--data-dir=" + filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	})
	if err != nil {
		return err
	}
	cp.etcd = cmd
	return WaitFor(ctx, 30*time.Second, "etcd", func() error { return EtcdHealthy(client) })
}

// EtcdHealthy asks the etcd serving clients at url whether it is healthy:
// nil when its /health answers 200.
func EtcdHealthy(url string) error {
	resp, err := http.Get(url + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd /health: %s", resp.Status)
	}
	return nil
}

func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	keyFile := filepath.Join(cp.Dir, "sa.key")
	if err := writeSigningKey(keyFile); err != nil {
		return err
	}
	tokens := filepath.Join(cp.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(AdminToken+",admin,admin-uid,system:masters\n"), 0o600); err != nil {
		return err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	cp.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	proxyArgs, clientCA, err := FrontProxy(cp.Dir)
	if err != nil {
		return err
	}
	cp.clientCA = clientCA
	auditArgs, err := audit(cp.Dir)
	if err != nil {
		return err
	}
	cp.apiserverArgs = []string{
		"--etcd-servers=" + cp.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + filepath.Join(cp.Dir, "certs"),
		"--token-auth-file=" + tokens,
		// The Node authorizer and NodeRestriction act only on requests of
		// users system:node:<name> in group system:nodes; every other
		// caller is authorized by RBAC alone, as before.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + keyFile,
		"--service-account-signing-key-file=" + keyFile,
		"--api-audiences=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/108",
		"--endpoint-reconciler-type=none",
		// No controller-manager runs here, so nothing would create the
		// `default` ServiceAccount that the ServiceAccount admission plugin
		// insists on for every Pod.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--storage-media-type=application/vnd.kubernetes.protobuf",
		"--v=0",
	}
	cp.apiserverArgs = append(append(cp.apiserverArgs, proxyArgs...), auditArgs...)
	if err := cp.runAPIServer(ctx, cp.apiserverArgs); err != nil {
		return err
	}
	return cp.writeKubeconfig()
}

func (cp *ControlPlane) runAPIServer(ctx context.Context, args []string) error {
	cmd, err := cp.launch("kube-apiserver", args)
	if err != nil {
		return err
	}
	cp.apiserver = cmd
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return WaitFor(ctx, 60*time.Second, "kube-apiserver", func() error {
		if cmd.ProcessState != nil {
			return fmt.Errorf("kube-apiserver exited: %s (log %s)", cmd.ProcessState, cp.logPath("kube-apiserver"))
		}
		return Readyz(ctx, client, cp.APIServerURL, AdminToken)
	})
}

// Readyz asks the kube-apiserver at url, with the bearer token of an
// admin, whether it is ready: nil when its /readyz answers 200.
func Readyz(ctx context.Context, client *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube-apiserver /readyz: %s", resp.Status)
	}
	return nil
}

func (cp *ControlPlane) logPath(name string) string { return filepath.Join(cp.Dir, name+".log") }

func (cp *ControlPlane) launch(name string, args []string) (*exec.Cmd, error) {
	var out *os.File
	var err error
	if cp.opts.Logs != nil {
		out, err = cp.opts.Logs(name)
	} else {
		out, err = os.OpenFile(cp.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	}
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(cp.BinDir, name), args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = ProcAttr(cp.opts.KeepAlive)
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); out.Close() }()
	return cmd, nil
}

// ProcAttr returns process attributes for a child: its own process group and,
// unless keepAlive, SIGKILL when the parent dies, so a crashed test leaves no
// API server behind.
func ProcAttr(keepAlive bool) *syscall.SysProcAttr {
	if keepAlive {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func (cp *ControlPlane) writeKubeconfig() error {
	cp.KubeconfigPath = filepath.Join(cp.Dir, "kubeconfig")
	return os.WriteFile(cp.KubeconfigPath, []byte(Kubeconfig(cp.APIServerURL, AdminToken)), 0o600)
}

// Kubeconfig renders a kubeconfig for server authenticating with token. The
// loopback server's certificate is self-signed, hence insecure-skip-tls-verify.
func Kubeconfig(server, token string) string {
	return kubeconfig(server, "", "user", "token: "+token)
}

// kubeconfig renders the one kubeconfig shape of the test API servers: one
// cluster at server, trusted with caFile (or, when empty, not verified),
// and user with credentials (the lines of its user: block).
func kubeconfig(server, caFile, user, credentials string) string {
	trust := "insecure-skip-tls-verify: true"
	if caFile != "" {
		trust = "certificate-authority: " + caFile
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: ipledger-local
  cluster:
    server: %s
    %s
users:
- name: %s
  user:
    %s
contexts:
- name: ipledger-local
  context:
    cluster: ipledger-local
    user: %s
current-context: ipledger-local
`, server, trust, user, credentials, user)
}

func writeSigningKey(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// WaitFor polls check until it returns nil, or fails after timeout naming
// what and check's last error.
func WaitFor(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w", what, timeout, last)
		case <-tick.C:
		}
	}
}

// RepoRoot finds the repository root (the folder holding go.work) from the
// working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above the working directory")
		}
		dir = parent
	}
}

// ToolsBin returns the folder of the pinned tools: $IPLEDGER_TOOLS_BIN, else
// whatever hack/build-tools.sh prints (it builds them on first use, ~11 min).
func ToolsBin() (string, error) {
	if bin := os.Getenv("IPLEDGER_TOOLS_BIN"); bin != "" {
		return bin, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "build-tools.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/build-tools.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// HelmBin returns the path of the pinned Helm CLI: helm in
// $IPLEDGER_HELM_DIR, else in the folder hack/build-helm.sh prints (it builds
// it on first use, ~3 min).
func HelmBin() (string, error) {
	if dir := os.Getenv("IPLEDGER_HELM_DIR"); dir != "" {
		return filepath.Join(dir, "helm"), nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "build-helm.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/build-helm.sh: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "helm"), nil
}
