package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/install"
	"github.com/ipledger/ipledger/pkg/version"
)

// components in start order: consumers need the watcher first.
var components = []string{"watcher", "ipam", "endpoints", "eipd"}

const systemNamespace = install.DefaultNamespace

// Dev is the local environment rooted at <repo>/.dev.
type Dev struct {
	root, dir string
	state     State
}

// State is what `up` started, saved in .dev/state.json.
type State struct {
	APIServerURL string         `json:"apiServerURL"`
	ToolsBin     string         `json:"toolsBin"`
	MotoURL      string         `json:"motoURL"`
	Infra        []Proc         `json:"infra"`
	Services     []Proc         `json:"services"`
	Replicas     map[string]int `json:"replicas"`
}

// Proc is one process started by ipledger-dev.
type Proc struct {
	Name      string `json:"name"`
	Component string `json:"component,omitempty"`
	Replica   int    `json:"replica"`
	PID       int    `json:"pid"`
	GRPCAddr  string `json:"grpcAddr,omitempty"`
	OpsAddr   string `json:"opsAddr,omitempty"`
	Log       string `json:"log"`
}

func newDev() (*Dev, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	d := &Dev{root: root, dir: filepath.Join(root, ".dev")}
	if b, err := os.ReadFile(d.path("state.json")); err == nil {
		if err := json.Unmarshal(b, &d.state); err != nil {
			return nil, fmt.Errorf(".dev/state.json is unreadable (%v): run `ipledger-dev down` or delete .dev", err)
		}
	}
	return d, nil
}

func (d *Dev) path(parts ...string) string {
	return filepath.Join(append([]string{d.dir}, parts...)...)
}

func (d *Dev) save() error {
	b, _ := json.MarshalIndent(d.state, "", "  ")
	return os.WriteFile(d.path("state.json"), b, 0o644)
}

func step(format string, args ...any) { fmt.Fprintf(os.Stderr, "==> "+format+"\n", args...) }

// Up starts whatever is not running yet.
func (d *Dev) Up(replicas map[string]int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	for _, dir := range []string{"logs", "bin", "tokens"} {
		if err := os.MkdirAll(d.path(dir), 0o755); err != nil {
			return err
		}
	}
	if !d.infraRunning() {
		if err := d.startInfra(ctx); err != nil {
			return err
		}
	} else {
		step("control plane already running at %s", d.state.APIServerURL)
	}
	client, err := kubernetes.NewForConfig(d.adminConfig())
	if err != nil {
		return err
	}
	step("building the four binaries")
	if err := d.buildBinaries(); err != nil {
		return err
	}
	if err := d.issueTokens(ctx, client); err != nil {
		return err
	}
	d.state.Replicas = replicas
	if err := d.startServices(ctx); err != nil {
		return err
	}
	if err := d.save(); err != nil {
		return err
	}
	step("up in %s; `ipledger-dev env` prints the variables, logs are in .dev/logs", time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (d *Dev) infraRunning() bool {
	if len(d.state.Infra) == 0 {
		return false
	}
	for _, p := range d.state.Infra {
		if !alive(p.PID) {
			return false
		}
	}
	return true
}

func (d *Dev) startInfra(ctx context.Context) error {
	_ = d.Down() // whatever was left half-running
	if err := os.MkdirAll(d.path("logs"), 0o755); err != nil {
		return err
	}
	step("building tools (the first time takes about 11 minutes)")
	bin, err := controlplane.ToolsBin()
	if err != nil {
		return err
	}
	step("starting etcd and kube-apiserver")
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Dir: d.path("cp"), BinDir: bin, KeepAlive: true,
		Logs: func(name string) (*os.File, error) {
			return os.OpenFile(d.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		},
	})
	if err != nil {
		return err
	}
	d.state = State{APIServerURL: cp.APIServerURL, ToolsBin: bin}
	d.state.Infra = append(d.state.Infra,
		Proc{Name: "etcd", PID: cp.EtcdPID(), Log: d.path("logs", "etcd.log")},
		Proc{Name: "kube-apiserver", PID: cp.APIServerPID(), Log: d.path("logs", "kube-apiserver.log")})
	if err := d.save(); err != nil {
		return err
	}
	if err := os.WriteFile(d.path("kubeconfig"), []byte(controlplane.Kubeconfig(cp.APIServerURL, controlplane.AdminToken)), 0o600); err != nil {
		return err
	}
	step("applying CRDs and RBAC from deploy/kustomize")
	for _, k := range []string{"deploy/kustomize/base/crds", "deploy/kustomize/base/rbac"} {
		if out, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "--kubeconfig", d.path("kubeconfig"),
			"apply", "--server-side", "-k", filepath.Join(d.root, k)).CombinedOutput(); err != nil {
			return fmt.Errorf("apply %s: %v\n%s", k, err, out)
		}
	}
	step("starting moto_server (EC2)")
	return d.startMoto(ctx)
}

func (d *Dev) startMoto(ctx context.Context) error {
	moto, err := exec.LookPath("moto_server")
	if err != nil {
		return errors.New("moto_server not found on PATH: it serves EC2 for eipd (pip install 'moto[server]')")
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	p, err := d.spawn(Proc{Name: "moto"}, moto, nil, "-H", "127.0.0.1", "-p", fmt.Sprint(ports[0]))
	if err != nil {
		return err
	}
	d.state.Infra = append(d.state.Infra, p)
	d.state.MotoURL = url
	if err := d.save(); err != nil {
		return err
	}
	return waitHTTP(ctx, url+"/moto-api/", 30*time.Second)
}

func (d *Dev) adminConfig() *rest.Config {
	return (&controlplane.ControlPlane{APIServerURL: d.state.APIServerURL}).RESTConfig()
}

// buildBinaries builds the four services for this machine, stamped with
// the work tree's release (--version, ipledger_build_info).
func (d *Dev) buildBinaries() error {
	prov, err := containerimage.ReadProvenance(context.Background(), d.root)
	if err != nil {
		return err
	}
	args := []string{"build", "-ldflags", version.Stamp(prov.Version, prov.Revision), "-o", d.path("bin") + "/"}
	for _, c := range components {
		args = append(args, "./services/"+c+"/cmd/ipledger-"+c)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = d.root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// issueTokens writes, per service and for the viewer used with grpcurl, what
// a Pod of it would mount: a kubeconfig with a ServiceAccount token for the
// Kubernetes API (the automounted token; a service's is bound to a Pod,
// controlplane.PodToken, since ipam writes its ledger from a Pod only) and a
// token file for the gRPC server it calls (the projected token; the
// kube-apiserver refuses it): a service calls the watcher
// (authz.WatcherAudience), the viewer ipam and eipd (authz.IPAMAudience,
// authz.EIPDAudience).
func (d *Dev) issueTokens(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.CoreV1().ServiceAccounts(systemNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ipledger-viewer"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ipledger-dev:viewer-operator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipledger:operator"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ipledger-viewer", Namespace: systemNamespace}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, sa := range append(append([]string{}, components...), "viewer") {
		var apiToken string
		if sa == "viewer" {
			apiToken, err = requestToken(ctx, client, "ipledger-"+sa, nil)
		} else {
			// Bound to a Pod, an object nothing runs here.
			apiToken, err = controlplane.PodToken(ctx, client, systemNamespace, "ipledger-"+sa, tokenExpiry)
		}
		if err != nil {
			return err
		}
		audiences := []string{authz.WatcherAudience}
		if sa == "viewer" {
			audiences = []string{authz.IPAMAudience, authz.EIPDAudience}
		}
		grpcToken, err := requestToken(ctx, client, "ipledger-"+sa, audiences)
		if err != nil {
			return err
		}
		if err := os.WriteFile(d.path("tokens", sa+".token"), []byte(grpcToken), 0o600); err != nil {
			return err
		}
		kc := controlplane.Kubeconfig(d.state.APIServerURL, apiToken)
		if err := os.WriteFile(d.path("tokens", sa+".kubeconfig"), []byte(kc), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// tokenExpiry is how long the tokens of `up` last.
const tokenExpiry = 24 * time.Hour

// requestToken returns a one-day token of ServiceAccount name for audiences
// (nil: the Kubernetes API's own).
func requestToken(ctx context.Context, client kubernetes.Interface, name string, audiences []string) (string, error) {
	expiry := int64(tokenExpiry / time.Second)
	tr, err := client.CoreV1().ServiceAccounts(systemNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, Audiences: audiences}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s (audiences %q): %w", name, audiences, err)
	}
	return tr.Status.Token, nil
}

func (d *Dev) startServices(ctx context.Context) error {
	kept := d.state.Services[:0]
	for _, p := range d.state.Services {
		if alive(p.PID) && p.Replica < d.state.Replicas[p.Component] {
			kept = append(kept, p)
			continue
		}
		stopPID(p.PID)
	}
	d.state.Services = kept
	for _, c := range components {
		for r := range d.state.Replicas[c] {
			if d.find(c, r) != nil {
				continue
			}
			if err := d.startService(c, r); err != nil {
				return err
			}
		}
		if err := d.save(); err != nil {
			return err
		}
		for r := range d.state.Replicas[c] {
			p := d.find(c, r)
			if err := waitHTTP(ctx, "http://"+p.OpsAddr+"/readyz", 60*time.Second); err != nil {
				return fmt.Errorf("%s: %w (log: %s)", p.Name, err, p.Log)
			}
		}
		step("%s ready (%d replica(s))", c, d.state.Replicas[c])
	}
	return nil
}

func (d *Dev) find(component string, replica int) *Proc {
	for i := range d.state.Services {
		if p := &d.state.Services[i]; p.Component == component && p.Replica == replica {
			return p
		}
	}
	return nil
}

func (d *Dev) watcherTarget() string {
	var addrs []string
	for _, p := range d.state.Services {
		if p.Component == "watcher" {
			addrs = append(addrs, p.GRPCAddr)
		}
	}
	sort.Strings(addrs)
	return "static:///" + strings.Join(addrs, ",")
}

func (d *Dev) startService(component string, replica int) error {
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		return err
	}
	p := Proc{
		Name: fmt.Sprintf("%s-%d", component, replica), Component: component, Replica: replica,
		GRPCAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), OpsAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
	}
	args := []string{
		"--kubeconfig=" + d.path("tokens", component+".kubeconfig"),
		"--ops-addr=" + p.OpsAddr,
	}
	if component != "endpoints" {
		args = append(args, "--grpc-addr="+p.GRPCAddr, "--grpc-plaintext")
	}
	if component != "watcher" {
		args = append(args,
			"--watcher-addr="+d.watcherTarget(), "--watcher-plaintext",
			"--watcher-token-file="+d.path("tokens", component+".token"),
			"--leader-elect-identity="+p.Name)
	}
	var env []string
	if component == "eipd" {
		args = append(args, "--cluster-id=ipledger-dev")
		env = append(env, "AWS_ENDPOINT_URL_EC2="+d.state.MotoURL, "AWS_REGION=us-east-1",
			"AWS_ACCESS_KEY_ID=testing", "AWS_SECRET_ACCESS_KEY=testing")
	}
	started, err := d.spawn(p, d.path("bin", "ipledger-"+component), env, args...)
	if err != nil {
		return err
	}
	d.state.Services = append(d.state.Services, started)
	return nil
}

// spawn starts a process in its own session (it outlives this command) with
// output appended to .dev/logs/<name>.log.
func (d *Dev) spawn(p Proc, path string, env []string, args ...string) (Proc, error) {
	p.Log = d.path("logs", p.Name+".log")
	out, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return p, err
	}
	defer out.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = controlplane.ProcAttr(true)
	if err := cmd.Start(); err != nil {
		return p, fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.PID = cmd.Process.Pid
	_ = cmd.Process.Release()
	return p, nil
}

// Down stops every process and deletes the control plane's data. The
// services stop first (they release their Leases through the API server),
// then the infrastructure.
func (d *Dev) Down() error {
	stopAll(d.state.Services)
	stopAll(d.state.Infra)
	d.state = State{}
	_ = os.Remove(d.path("state.json"))
	return os.RemoveAll(d.path("cp"))
}

// Status prints every process and whether it runs.
func (d *Dev) Status(w io.Writer) error {
	if len(d.state.Infra) == 0 {
		fmt.Fprintln(w, "not running (ipledger-dev up)")
		return nil
	}
	fmt.Fprintf(w, "kube-apiserver %s\nmoto           %s\n\n", d.state.APIServerURL, d.state.MotoURL)
	fmt.Fprintf(w, "%-16s %-8s %-8s %-22s %s\n", "NAME", "PID", "STATE", "GRPC", "OPS")
	for _, p := range append(append([]Proc{}, d.state.Infra...), d.state.Services...) {
		state := "running"
		if !alive(p.PID) {
			state = "stopped"
		}
		fmt.Fprintf(w, "%-16s %-8d %-8s %-22s %s\n", p.Name, p.PID, state, p.GRPCAddr, p.OpsAddr)
	}
	return nil
}

// Env prints export lines for the shell: eval "$(ipledger-dev env)".
func (d *Dev) Env(w io.Writer) error {
	if len(d.state.Infra) == 0 {
		return errors.New("not running (ipledger-dev up)")
	}
	first := func(c string) string {
		if p := d.find(c, 0); p != nil {
			return p.GRPCAddr
		}
		return ""
	}
	token, err := os.ReadFile(d.path("tokens", "viewer.token"))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "export KUBECONFIG=%s\n", d.path("kubeconfig"))
	fmt.Fprintf(w, "export PATH=%s:$PATH\n", d.state.ToolsBin)
	fmt.Fprintf(w, "export IPLEDGER_WATCHER_ADDR=%s\n", first("watcher"))
	fmt.Fprintf(w, "export IPLEDGER_IPAM_ADDR=%s\n", first("ipam"))
	fmt.Fprintf(w, "export IPLEDGER_EIPD_ADDR=%s\n", first("eipd"))
	fmt.Fprintf(w, "export IPLEDGER_TOKEN=%s\n", strings.TrimSpace(string(token)))
	fmt.Fprintf(w, "export AWS_ENDPOINT_URL_EC2=%s AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing\n", d.state.MotoURL)
	return nil
}

// Logs prints the logs of one component (all replicas) or of everything.
func (d *Dev) Logs(w io.Writer, follow bool, component string) error {
	pattern := d.path("logs", "*.log")
	if component != "" {
		pattern = d.path("logs", component+"*.log")
	}
	files, _ := filepath.Glob(pattern)
	if len(files) == 0 {
		return fmt.Errorf("no logs match %s", pattern)
	}
	args := append([]string{"-n", "200"}, files...)
	if follow {
		// --pid: the follower ends with this command, however this command
		// ends (Ctrl-C through make and go run, a kill), instead of being
		// left behind tailing .dev/logs.
		args = append([]string{"-F", fmt.Sprintf("--pid=%d", os.Getpid())}, args...)
	}
	cmd := exec.Command("tail", args...)
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	return cmd.Run()
}

// Control stops, starts or restarts one component (or one replica of it).
func (d *Dev) Control(action, component string, replica int) error {
	known := false
	for _, c := range components {
		known = known || c == component
	}
	if !known {
		return fmt.Errorf("unknown component %q (watcher, ipam, endpoints, eipd)", component)
	}
	if action != "start" {
		kept := d.state.Services[:0]
		for _, p := range d.state.Services {
			if p.Component == component && (replica < 0 || p.Replica == replica) {
				stopPID(p.PID)
				step("stopped %s", p.Name)
				continue
			}
			kept = append(kept, p)
		}
		d.state.Services = kept
		if err := d.save(); err != nil {
			return err
		}
	}
	if action == "stop" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return errors.Join(d.startServices(ctx), d.save())
}

// stopAll stops the processes concurrently.
func stopAll(procs []Proc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { stopPID(p.PID) })
	}
	wg.Wait()
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// stopPID ends a process group started by spawn: SIGTERM, then SIGKILL.
func stopPID(pid int) {
	if !alive(pid) {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	for range 100 {
		if !alive(pid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 300 {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %s: %v", timeout, last)
}
