package journey

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
)

// SharedIPAnnotation lets Services with the same value share an IP.
const SharedIPAnnotation = "ipledger.io/allow-shared-ip"

// LoadBalancers lists the Services ipam is responsible for.
func LoadBalancers(ctx context.Context, c kubernetes.Interface) ([]corev1.Service, error) {
	list, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Service
	for _, svc := range list.Items {
		class := svc.Spec.LoadBalancerClass
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && (class == nil || *class == "ipledger.io/lb") {
			out = append(out, svc)
		}
	}
	return out, nil
}

// StatusIPs maps each IP in a Service status to the Services showing it.
func StatusIPs(services []corev1.Service) map[string][]corev1.Service {
	byIP := map[string][]corev1.Service{}
	for _, svc := range services {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			byIP[in.IP] = append(byIP[in.IP], svc)
		}
	}
	return byIP
}

// NoIPOnTwoServices fails when one IP shows on two Services that did
// not both ask to share it under the same key.
func NoIPOnTwoServices(services []corev1.Service) error {
	for ip, holders := range StatusIPs(services) {
		if len(holders) < 2 {
			continue
		}
		key := holders[0].Annotations[SharedIPAnnotation]
		for _, h := range holders[1:] {
			if key == "" || h.Annotations[SharedIPAnnotation] != key {
				var names []string
				for _, h := range holders {
					names = append(names, h.Namespace+"/"+h.Name)
				}
				return fmt.Errorf("IP %s is on %d Services without a common sharing key: %s", ip, len(holders), strings.Join(names, ", "))
			}
		}
	}
	return nil
}

// LedgerAllocations pages through ipam's ListAllocations: the ledger as any
// replica sees it.
func LedgerAllocations(ctx context.Context, conn *grpc.ClientConn) ([]*ipamv1.Allocation, error) {
	client := ipamv1grpc.NewIPAMServiceClient(conn)
	var all []*ipamv1.Allocation
	token := ""
	for {
		resp, err := client.ListAllocations(ctx, &ipamv1.ListAllocationsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, err
		}
		all = append(all, resp.Allocations...)
		if token = resp.NextPageToken; token == "" {
			return all, nil
		}
	}
}

// LedgerEqualsStatuses compares the ledger's (service, ip) pairs held —
// not those kept for a Service that released them (kept_until) — with the
// Services' status ingress.
func LedgerEqualsStatuses(ctx context.Context, conn *grpc.ClientConn, services []corev1.Service) error {
	allocs, err := LedgerAllocations(ctx, conn)
	if err != nil {
		return err
	}
	var ledger, status []string
	for _, a := range allocs {
		if a.GetKeptUntil() == "" {
			ledger = append(ledger, a.Service.Namespace+"/"+a.Service.Name+"="+a.Ip)
		}
	}
	for _, svc := range services {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			status = append(status, svc.Namespace+"/"+svc.Name+"="+in.IP)
		}
	}
	sort.Strings(ledger)
	sort.Strings(status)
	if strings.Join(ledger, " ") != strings.Join(status, " ") {
		return fmt.Errorf("ledger (%d entries) differs from statuses (%d):\n only in ledger: %v\n only in status: %v",
			len(ledger), len(status), minus(ledger, status), minus(status, ledger))
	}
	return nil
}

func minus(a, b []string) []string {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
		if len(out) == 10 {
			out = append(out, "…")
			break
		}
	}
	return out
}

// SliceAddresses returns the addresses in the EndpointSlices ipledger
// manages for one Service.
func SliceAddresses(ctx context.Context, c kubernetes.Interface, namespace, service string) ([]string, error) {
	slices, err := c.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + service + "," + discoveryv1.LabelManagedBy + "=endpoints.ipledger.io",
	})
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, sl := range slices.Items {
		for _, ep := range sl.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
	}
	sort.Strings(addrs)
	return addrs, nil
}
