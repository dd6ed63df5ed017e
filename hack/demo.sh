#!/usr/bin/env bash
# The demo `make run` plays after `ipledger-dev up`: pools, Services getting
# IPs (a shared one, a dual-stack one, one left pending with its reason),
# ExternalWorkloads becoming an EndpointSlice, a moto-backed Node getting an
# Elastic IP, and grpcurl showing it all. Idempotent: safe to run twice.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib/go.sh
eval "$(go run ./lab/cmd/ipledger-dev env)"
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
wait_for() { # description, command...
  local what=$1; shift
  for _ in $(seq 1 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "demo: timed out waiting for $what" >&2; return 1
}
grpc() { grpcurl -plaintext -H "authorization: Bearer $IPLEDGER_TOKEN" "$@"; }

say "Two IPPools: a public one (IPv4 + IPv6) and a small one only for namespace team-b"
kubectl apply -f - <<'YAML'
apiVersion: ipledger.io/v1alpha1
kind: IPPool
metadata: {name: public}
spec:
  addresses: [192.0.2.0/28, 2001:db8:1::/120]
  avoidBuggyIPs: true
---
apiVersion: ipledger.io/v1alpha1
kind: IPPool
metadata: {name: team-b}
spec:
  addresses: [198.51.100.10-198.51.100.11]
  allocation: {namespaces: [team-b]}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
YAML

say "LoadBalancer Services: web, two sharing one IP, a dual-stack one, one asking for an IP outside every pool"
kubectl apply -f - <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: web, namespace: team-a, labels: {app: web}}
spec: {type: LoadBalancer, selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: dns-tcp, namespace: team-a, annotations: {ipledger.io/allow-shared-ip: dns}}
spec: {type: LoadBalancer, selector: {app: dns}, ports: [{name: dns, port: 53, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: dns-udp, namespace: team-a, annotations: {ipledger.io/allow-shared-ip: dns}}
spec: {type: LoadBalancer, selector: {app: dns}, ports: [{name: dns, port: 53, protocol: UDP}]}
---
apiVersion: v1
kind: Service
metadata: {name: dual, namespace: team-b}
spec: {type: LoadBalancer, ipFamilyPolicy: PreferDualStack, ipFamilies: [IPv4, IPv6], selector: {app: dual}, ports: [{port: 443}]}
---
apiVersion: v1
kind: Service
metadata: {name: wants-other, namespace: team-a, annotations: {ipledger.io/loadBalancerIPs: 203.0.113.7}}
spec: {type: LoadBalancer, selector: {app: x}, ports: [{port: 80}]}
YAML
wait_for "web's IP" bash -c '[ -n "$(kubectl -n team-a get svc web -o jsonpath={.status.loadBalancer.ingress[0].ip})" ]'
wait_for "dual's IP" bash -c '[ -n "$(kubectl -n team-b get svc dual -o jsonpath={.status.loadBalancer.ingress[0].ip})" ]'
kubectl get svc -A -o custom-columns='NAMESPACE:.metadata.namespace,NAME:.metadata.name,IPS:.status.loadBalancer.ingress[*].ip,POOL:.metadata.annotations.ipledger\.io/allocated-from-pool' | grep -v '^default'
kubectl get ippools

say "grpcurl: allocations, pools, and why wants-other is pending"
grpc "$IPLEDGER_IPAM_ADDR" ipledger.ipam.v1.IPAMService/ListAllocations
grpc "$IPLEDGER_IPAM_ADDR" ipledger.ipam.v1.IPAMService/ListPools
grpc -d '{"service":{"namespace":"team-a","name":"wants-other"}}' "$IPLEDGER_IPAM_ADDR" ipledger.ipam.v1.IPAMService/ExplainService

say "ExternalWorkloads (VMs) selected by web become an EndpointSlice"
kubectl apply -f - <<'YAML'
apiVersion: ipledger.io/v1alpha1
kind: ExternalWorkload
metadata: {name: vm-1, namespace: team-a, labels: {app: web, topology.kubernetes.io/zone: zone-a}}
spec: {workloadIPs: [{ip: 10.20.0.1}], ports: [{name: http, port: 8080}]}
---
apiVersion: ipledger.io/v1alpha1
kind: ExternalWorkload
metadata: {name: vm-2, namespace: team-a, labels: {app: web}}
spec: {workloadIPs: [{ip: 10.20.0.2}], ports: [{name: http, port: 8080}]}
YAML
for vm in vm-1 vm-2; do
  kubectl -n team-a patch externalworkload $vm --subresource=status --type=merge \
    -p '{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Probed","message":"demo","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}' >/dev/null
done
wait_for "web's EndpointSlice" bash -c '[ -n "$(kubectl -n team-a get endpointslices -l kubernetes.io/service-name=web -o name)" ]'
kubectl -n team-a get endpointslices -l endpointslice.kubernetes.io/managed-by=endpoints.ipledger.io

say "A Node backed by a (moto) EC2 instance of the cluster (tagged ipledger.io/cluster=ipledger-dev), opted in by the operator"
read -r instance private_ip < <(python3 - <<'PY'
import json, os, urllib.request, urllib.parse
url = os.environ["AWS_ENDPOINT_URL_EC2"]
def call(params):
    data = urllib.parse.urlencode(dict(params, Version="2016-11-15")).encode()
    req = urllib.request.Request(url, data=data, headers={"Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=x"})
    return urllib.request.urlopen(req).read().decode()
body = call({"Action": "RunInstances", "ImageId": "ami-12c6146b", "MinCount": 1, "MaxCount": 1, "InstanceType": "t3.micro",
             "TagSpecification.1.ResourceType": "instance",
             "TagSpecification.1.Tag.1.Key": "ipledger.io/cluster", "TagSpecification.1.Tag.1.Value": "ipledger-dev"})
import re
print(re.search(r"<instanceId>(i-[0-9a-f]+)</instanceId>", body).group(1),
      re.search(r"<privateIpAddress>([0-9.]+)</privateIpAddress>", body).group(1))
PY
)
kubectl apply -f - <<YAML
apiVersion: v1
kind: Node
metadata: {name: demo-node-1, labels: {node-restriction.kubernetes.io/ipledger-externalip-auto-assign: "true"}}
spec: {providerID: "aws:///us-east-1a/$instance"}
YAML
# What a kubelet reports: eipd associates only with an instance whose private IP is the Node's InternalIP.
kubectl patch node demo-node-1 --subresource=status --type=merge -p "{\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"$private_ip\"}]}}"
wait_for "the Node's EIP label" bash -c '[ -n "$(kubectl get node demo-node-1 -o jsonpath={.metadata.labels.ipledger\\.io/externalip})" ]'
kubectl get node demo-node-1 -L ipledger.io/externalip
grpc "$IPLEDGER_EIPD_ADDR" ipledger.eipd.v1.EIPService/ListAddresses

say "Done. Try: eval \"\$(go run ./lab/cmd/ipledger-dev env)\"; grpcurl -plaintext -H \"authorization: Bearer \$IPLEDGER_TOKEN\" \$IPLEDGER_IPAM_ADDR list"
