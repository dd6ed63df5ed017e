{{/*
Pieces the Deployments share. Each Deployment template says, beside what it
renders, which kustomize component or patch makes the same change; the order
of appended arguments is the order of the components in a kustomization that
lists them as docs/install.md says (eip, high-availability, tls or
tls-signer, cert-manager, prometheus, monitoring, workload-grants,
require-lb-class, kube-vip, then an overlay's own patches).
*/}}

{{/* The namespace of every namespaced object (the base's). */}}
{{- define "ipledger.namespace" -}}ipledger-system{{- end }}

{{/* The watcher's address, what ipam, endpoints and eipd dial (and what a certificate must name). */}}
{{- define "ipledger.watcherAddr" -}}dns:///ipledger-watcher.ipledger-system.svc.cluster.local:9443{{- end }}

{{/* Fails on a choice the chart cannot render, naming the value and the fix. */}}
{{- define "ipledger.validate" -}}
{{- if and .Values.eip.enabled (not .Values.eip.clusterID) -}}
{{- fail "eip.enabled is true and eip.clusterID is empty: eipd needs its cluster ID, a name unique in the AWS account (two clusters sharing one sweep each other's addresses): --set eip.clusterID=<name> (docs/eipd.md; kustomize's components/eip fails the same way without the ConfigMap ipledger-eip's data.cluster-id)" -}}
{{- end -}}
{{- if and .Values.prometheus .Values.monitoring -}}
{{- fail "prometheus and monitoring are both true: use one per Prometheus (scrape annotations, or the Prometheus Operator's ServiceMonitor), not both (components/monitoring)" -}}
{{- end -}}
{{- end }}

{{/* metadata.labels and the Pod template's labels. */}}
{{- define "ipledger.labels" -}}
app.kubernetes.io/name: {{ . }}
app.kubernetes.io/part-of: ipledger
{{- end }}

{{/* The Pod template's metadata (components/prometheus adds the annotations). */}}
{{- define "ipledger.podMetadata" -}}
{{- if .root.Values.prometheus }}
annotations:
  prometheus.io/path: /metrics
  prometheus.io/port: "8080"
  prometheus.io/scrape: "true"
{{- end }}
labels:
  {{- include "ipledger.labels" .name | nindent 2 }}
{{- end }}

{{/* components/high-availability's spread, on every Deployment the build holds when it runs. */}}
{{- define "ipledger.spread" -}}
{{- if .Values.highAvailability }}
topologySpreadConstraints:
- labelSelector:
    matchExpressions:
    - key: app.kubernetes.io/part-of
      operator: In
      values:
      - ipledger
  matchLabelKeys:
  - pod-template-hash
  maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: ScheduleAnyway
{{- end }}
{{- end }}

{{- define "ipledger.podSecurityContext" -}}
securityContext:
  runAsGroup: 65532
  runAsNonRoot: true
  runAsUser: 65532
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{- define "ipledger.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  capabilities:
    drop:
    - ALL
  readOnlyRootFilesystem: true
{{- end }}

{{- define "ipledger.probes" -}}
livenessProbe:
  failureThreshold: 3
  httpGet:
    path: /healthz
    port: ops
  periodSeconds: 10
readinessProbe:
  httpGet:
    path: /readyz
    port: ops
  periodSeconds: 5
{{- end }}

{{- define "ipledger.env" -}}
env:
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      resource: limits.memory
{{- end }}

{{/* The projected token a client of the watcher presents (base). */}}
{{- define "ipledger.watcherTokenVolume" -}}
- name: watcher-token
  projected:
    sources:
    - serviceAccountToken:
        audience: ipledger.io/watcher
        expirationSeconds: 3600
        path: token
{{- end }}

{{/*
A gRPC server's TLS arguments: the base's --grpc-plaintext (argument 2)
replaced by components/tls or components/tls-signer. Takes the root context
and the server's name (watcher, ipam, eipd).
*/}}
{{- define "ipledger.grpcServerArg" -}}
{{- if eq .root.Values.tls "none" -}}
--grpc-plaintext
{{- else if eq .root.Values.tls "signer" -}}
--grpc-tls-signer=ipledger.io/grpc-serving
{{- else -}}
--grpc-tls-cert-file=/etc/ipledger/tls/tls.crt
{{- end -}}
{{- end }}

{{/* What components/tls and components/tls-signer append to a gRPC server's arguments. */}}
{{- define "ipledger.grpcServerExtraArgs" -}}
{{- if eq .root.Values.tls "signer" }}
- --grpc-tls-dns-names=ipledger-{{ .name }}.ipledger-system.svc.cluster.local,ipledger-{{ .name }}.ipledger-system.svc
{{- else if has .root.Values.tls (list "secrets" "cert-manager") }}
- --grpc-tls-key-file=/etc/ipledger/tls/tls.key
{{- end }}
{{- end }}

{{/* How ipam and eipd verify the watcher: the base's --watcher-plaintext (argument 4) replaced. */}}
{{- define "ipledger.watcherClientArg" -}}
{{- if eq .Values.tls "none" -}}
--watcher-plaintext
{{- else if eq .Values.tls "signer" -}}
--watcher-ca-file=/etc/ipledger/tls-ca/ca.crt
{{- else -}}
--watcher-ca-file=/etc/ipledger/tls/ca.crt
{{- end -}}
{{- end }}

{{/* components/tls's mount of a server's own Secret, or components/tls-signer's of the CA bundle. */}}
{{- define "ipledger.tlsMounts" -}}
{{- if eq .Values.tls "signer" }}
- mountPath: /etc/ipledger/tls-ca
  name: grpc-ca
  readOnly: true
{{- else if has .Values.tls (list "secrets" "cert-manager") }}
- mountPath: /etc/ipledger/tls
  name: grpc-tls
  readOnly: true
{{- end }}
{{- end }}

{{/* components/tls-signer's CA bundle volume (ipam, endpoints, eipd). */}}
{{- define "ipledger.caBundleVolume" -}}
- configMap:
    items:
    - key: ca.crt
      path: ca.crt
    name: ipledger-grpc-ca-bundle
  name: grpc-ca
{{- end }}

{{/* An image by tag or digest. */}}
{{- define "ipledger.image" -}}
{{- required (printf "images.%s is empty: name the image (repository:tag or repository@sha256:...)" .name) (index .root.Values.images .name) -}}
{{- end }}
