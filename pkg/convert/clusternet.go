package convert

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// ServiceCIDRResource is networking.k8s.io/v1 ServiceCIDR (Kubernetes 1.33
// and later), read through the dynamic client so that the watcher serves
// the kind only where the API serves it.
var ServiceCIDRResource = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"}

// ServiceCIDRKind is the kind of ServiceCIDRResource.
var ServiceCIDRKind = schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "ServiceCIDR"}

// KubernetesServiceLabelSelector selects the EndpointSlices of the Service
// default/kubernetes: the API server's own addresses.
const KubernetesServiceLabelSelector = "kubernetes.io/service-name=kubernetes"

type serviceCIDR struct {
	Spec struct {
		CIDRs []string `json:"cidrs"`
	} `json:"spec"`
}

// ServiceCIDR converts an unstructured networking.k8s.io ServiceCIDR.
func ServiceCIDR(u *unstructured.Unstructured) (*watcherv1.Object, error) {
	var s serviceCIDR
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &s); err != nil {
		return nil, fmt.Errorf("convert ServiceCIDR %s: %w", u.GetName(), err)
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE_CIDR, Meta: Meta(u),
		Body: &watcherv1.Object_ServiceCidr{ServiceCidr: &watcherv1.ServiceCIDR{Cidrs: s.Spec.CIDRs}}}, nil
}
