package cluster

import (
	"fmt"
	"strings"
)

// The node's fixed addresses and names. The ports are below Linux's
// ephemeral range, so the loopback control planes of lab/controlplane (which
// take free ephemeral ports) never collide with them.
const (
	// NodeName is the name the kubelet registers.
	NodeName = "ipledger-node"
	// APIServerPort is kube-apiserver's port on the node address.
	APIServerPort = 6443
	// ServiceCIDR holds every ClusterIP; the first is kubernetes.default.
	ServiceCIDR = "10.96.0.0/16"
	// DNSServiceIP is the ClusterIP of kube-system/kube-dns (CoreDNS).
	DNSServiceIP = "10.96.0.10"
	// PodCIDR is the first node's bridge's subnet: its pods' addresses.
	// Node n's is 10.244.(n-1).0/24.
	PodCIDR = "10.244.0.0/24"
	// ClusterCIDR holds the pod CIDRs of every node (kube-proxy's
	// clusterCIDR: traffic from elsewhere to a ClusterIP is masqueraded).
	ClusterCIDR = "10.244.0.0/17"
	// NodeLinkCIDR holds the links between the host and the nodes beyond
	// the first, a /30 each: node n's is the (n-2)th, the host's address
	// on it the first, the node's the second (its InternalIP).
	NodeLinkCIDR = "10.244.255.0/24"
	// ClusterDomain is the DNS suffix of Services.
	ClusterDomain = "cluster.local"
	// Bridge is the Linux bridge the CNI plugin puts pods on.
	Bridge = "ipledger0"
	// PauseImage and CoreDNSImage are built by Up from hack/build-node.sh's
	// binaries; nothing is ever pulled.
	PauseImage   = "ipledger-node/pause:node"
	CoreDNSImage = "ipledger-node/coredns:node"
	// AgnhostImage is the only image Kubernetes' e2e specs run (its
	// test/utils/image/manifest.go), under the name they ask for: agnhost
	// of the pinned Kubernetes, with busybox's applets, dash, nc, curl and GNU wget
	// (hack/build-node.sh's rootfs/agnhost). Tests use it for client and
	// server pods too (`agnhost netexec`, `agnhost connect`).
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"

	etcdClientURL = "http://127.0.0.1:12379"
	etcdPeerURL   = "http://127.0.0.1:12380"
	cniNetwork    = "ipledger-node"
)

// containerdConfig is containerd's configuration: every path under dir, its
// own socket, runc with cgroupfs, and restrict_oom_score_adj, without which
// runc fails every sandbox on a host lacking CAP_SYS_RESOURCE.
func containerdConfig(l layout, pauseRef string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = "%[3]s.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
`, l.containerdRoot(), l.containerdState(), l.containerdSocket(), l.path("containerd", "opt"), pauseRef,
		l.path("containerd", "runc"), cniBinDir, l.cniConfDir())
}

// cniConfig is a node's pods' network: one bridge, addresses of podCIDR
// from host-local, no masquerade (pods talk only to this machine).
func cniConfig(l layout, bridge, podCIDR string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "loopback"}
  ]
}
`, cniNetwork, bridge, podCIDR, l.path("cni", "ipam"))
}

// kubeletConfig is the kubelet's configuration. cgroup v1 needs
// failCgroupV1: false; the eviction thresholds are low so that a busy shared
// disk does not evict the pods under test; healthz and the read-only port
// are off (fewer fixed ports); resolvConf is empty so that no pod ever sends
// a query to the host's resolver. A node beyond the first has a cgroup
// root of its own, beside the first's kubepods.
func kubeletConfig(cl layout, n node) string {
	cgroupRoot := ""
	if n.cgroupRoot != "" {
		cgroupRoot = "cgroupRoot: " + n.cgroupRoot + "\n"
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[2]q}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[3]s
clusterDNS: [%[4]s]
clusterDomain: %[5]s
resolvConf: ""
podLogsDir: %[6]q
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
rotateCertificates: false
`, n.IP, cl.caCert(), n.l.containerdSocket(), DNSServiceIP, ClusterDomain, n.l.path("pod-logs")) + cgroupRoot
}

// kubeProxyConfig is kube-proxy's configuration: iptables mode, and nothing
// that changes the host beyond its own chains (no conntrack table sizing or
// timeouts, no route_localnet, no OOM score, which this host cannot set).
// clusterCIDR is every node's pods (ClusterCIDR).
func kubeProxyConfig(cl layout, n node) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %[1]q}
mode: iptables
hostnameOverride: %[2]s
bindAddress: %[3]s
healthzBindAddress: %[3]s:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %[4]s
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
`, cl.kubeconfig(), n.Name, n.IP, ClusterCIDR)
}

// kubeconfig is a client configuration trusting ca for server, with token.
func kubeconfig(server, caFile, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: ipledger-node
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: ipledger-node
  context:
    cluster: ipledger-node
    user: admin
current-context: ipledger-node
`, server, caFile, token)
}

// coreDNSManifest is CoreDNS as the cluster DNS: kube-system/kube-dns at
// DNSServiceIP, serving only the cluster domain (nothing is forwarded: the
// node has no network beyond this machine). It listens on 5353 so that it
// runs as the image's non-root user.
func coreDNSManifest(image string) string {
	return strings.NewReplacer("IMAGE", image, "CLUSTER_DOMAIN", ClusterDomain, "DNS_IP", DNSServiceIP).Replace(`apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ipledger-node:coredns}
rules:
- apiGroups: [""]
  resources: [services, namespaces, pods]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ipledger-node:coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ipledger-node:coredns}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:5353 {
        errors
        health :8080
        ready :8181
        kubernetes CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
            fallthrough in-addr.arpa ip6.arpa
        }
        cache 5
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      containers:
      - name: coredns
        image: IMAGE
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 5353, protocol: UDP}
        - {name: dns-tcp, containerPort: 5353, protocol: TCP}
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
          periodSeconds: 2
        livenessProbe:
          httpGet: {path: /health, port: 8080}
        resources:
          limits: {memory: 128Mi}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap: {name: coredns}
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: DNS_IP
  ports:
  - {name: dns, port: 53, targetPort: 5353, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: 5353, protocol: TCP}
`)
}
