package convert

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// ipPoolSpec and friends mirror the CRD schemas in deploy/kustomize/base/crds;
// the unstructured content is decoded into them so a field of the wrong type is
// an error, not a silent zero.
type ipPoolSpec struct {
	Addresses        []string `json:"addresses"`
	AutoAssign       *bool    `json:"autoAssign"`
	AvoidBuggyIPs    bool     `json:"avoidBuggyIPs"`
	Exclude          []string `json:"exclude"`
	SkipFirstLastIPs bool     `json:"skipFirstLastIPs"`
	Allocation       *struct {
		Priority           int32                  `json:"priority"`
		Namespaces         []string               `json:"namespaces"`
		NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors"`
		ServiceSelectors   []metav1.LabelSelector `json:"serviceSelectors"`
		// MaxAddressesPerNamespace: 0 when unset (no cap).
		MaxAddressesPerNamespace int32 `json:"maxAddressesPerNamespace"`
		// KeepReleasedSeconds: nil when unset (ipam's default).
		KeepReleasedSeconds *int64 `json:"keepReleasedSeconds"`
	} `json:"allocation"`
}

type conditionsStatus struct {
	Conditions []metav1.Condition `json:"conditions"`
}

type ipPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ipPoolSpec       `json:"spec"`
	Status            conditionsStatus `json:"status"`
}

type externalWorkload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		WorkloadIPs []struct {
			IP string `json:"ip"`
		} `json:"workloadIPs"`
		Ports []struct {
			Name     string `json:"name"`
			Port     int32  `json:"port"`
			Protocol string `json:"protocol"`
		} `json:"ports"`
		ReadinessProbe *readinessProbe `json:"readinessProbe"`
	} `json:"spec"`
	Status conditionsStatus `json:"status"`
}

type readinessProbe struct {
	TCPSocket *struct {
		Port int32 `json:"port"`
	} `json:"tcpSocket"`
	HTTPGet *struct {
		Path   string `json:"path"`
		Port   int32  `json:"port"`
		Scheme string `json:"scheme"`
	} `json:"httpGet"`
	InitialDelaySeconds int32 `json:"initialDelaySeconds"`
	PeriodSeconds       int32 `json:"periodSeconds"`
	TimeoutSeconds      int32 `json:"timeoutSeconds"`
	SuccessThreshold    int32 `json:"successThreshold"`
	FailureThreshold    int32 `json:"failureThreshold"`
}

// The CRD's defaults for spec.readinessProbe. The API server fills them in;
// they are repeated here so an object stored before a default existed
// converts the same way.
const (
	defaultProbePeriodSeconds    = 10
	defaultProbeTimeoutSeconds   = 1
	defaultProbeSuccessThreshold = 1
	defaultProbeFailureThreshold = 3
	defaultProbeHTTPPath         = "/"
	defaultProbeHTTPScheme       = "HTTP"
)

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func convertProbe(p *readinessProbe) *watcherv1.ReadinessProbe {
	out := &watcherv1.ReadinessProbe{
		InitialDelaySeconds: p.InitialDelaySeconds,
		PeriodSeconds:       orDefault(p.PeriodSeconds, defaultProbePeriodSeconds),
		TimeoutSeconds:      orDefault(p.TimeoutSeconds, defaultProbeTimeoutSeconds),
		SuccessThreshold:    orDefault(p.SuccessThreshold, defaultProbeSuccessThreshold),
		FailureThreshold:    orDefault(p.FailureThreshold, defaultProbeFailureThreshold),
	}
	switch {
	case p.TCPSocket != nil:
		out.Action = &watcherv1.ReadinessProbe_TcpSocket{TcpSocket: &watcherv1.TCPSocketAction{Port: p.TCPSocket.Port}}
	case p.HTTPGet != nil:
		out.Action = &watcherv1.ReadinessProbe_HttpGet{HttpGet: &watcherv1.HTTPGetAction{
			Path: orDefault(p.HTTPGet.Path, defaultProbeHTTPPath), Port: p.HTTPGet.Port, Scheme: orDefault(p.HTTPGet.Scheme, defaultProbeHTTPScheme),
		}}
	}
	return out
}

// IPPool converts an unstructured ipledger.io/v1alpha1 IPPool.
func IPPool(u *unstructured.Unstructured) (*watcherv1.Object, error) {
	var p ipPool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &p); err != nil {
		return nil, fmt.Errorf("convert IPPool %s: %w", u.GetName(), err)
	}
	body := &watcherv1.IPPool{
		Addresses:        p.Spec.Addresses,
		AutoAssign:       p.Spec.AutoAssign == nil || *p.Spec.AutoAssign, // the CRD defaults it to true
		AvoidBuggyIps:    p.Spec.AvoidBuggyIPs,
		Exclude:          p.Spec.Exclude,
		SkipFirstLastIps: p.Spec.SkipFirstLastIPs,
		Conditions:       Conditions(p.Status.Conditions),
	}
	if a := p.Spec.Allocation; a != nil {
		body.Allocation = &watcherv1.IPPoolAllocation{Priority: a.Priority, Namespaces: a.Namespaces, MaxAddressesPerNamespace: a.MaxAddressesPerNamespace,
			KeepReleasedSeconds: a.KeepReleasedSeconds}
		body.Allocation.NamespaceSelectors = labelSelectors(a.NamespaceSelectors)
		body.Allocation.ServiceSelectors = labelSelectors(a.ServiceSelectors)
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_IP_POOL, Meta: Meta(u), Body: &watcherv1.Object_IpPool{IpPool: body}}, nil
}

// ExternalWorkload converts an unstructured ipledger.io/v1alpha1 ExternalWorkload.
func ExternalWorkload(u *unstructured.Unstructured) (*watcherv1.Object, error) {
	var w externalWorkload
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &w); err != nil {
		return nil, fmt.Errorf("convert ExternalWorkload %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	body := &watcherv1.ExternalWorkload{Conditions: Conditions(w.Status.Conditions)}
	for _, ip := range w.Spec.WorkloadIPs {
		body.WorkloadIps = append(body.WorkloadIps, ip.IP)
	}
	for _, p := range w.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = "TCP" // the CRD default
		}
		body.Ports = append(body.Ports, &watcherv1.WorkloadPort{Name: p.Name, Port: p.Port, Protocol: proto})
	}
	if w.Spec.ReadinessProbe != nil {
		body.ReadinessProbe = convertProbe(w.Spec.ReadinessProbe)
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_EXTERNAL_WORKLOAD, Meta: Meta(u), Body: &watcherv1.Object_ExternalWorkload{ExternalWorkload: body}}, nil
}

// LabelSelector converts a metav1.LabelSelector.
func LabelSelector(s *metav1.LabelSelector) *watcherv1.LabelSelector {
	out := &watcherv1.LabelSelector{}
	if len(s.MatchLabels) > 0 {
		out.MatchLabels = make(map[string]string, len(s.MatchLabels))
		for k, v := range s.MatchLabels {
			out.MatchLabels[k] = v
		}
	}
	for _, r := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, &watcherv1.LabelSelectorRequirement{Key: r.Key, Operator: string(r.Operator), Values: r.Values})
	}
	return out
}
