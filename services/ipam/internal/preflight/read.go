package preflight

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/preview"
)

// pageSize is the LIST page size: a list of 10,000 Services is read in
// pages rather than one answer of tens of MB.
const pageSize = 500

// Read reads what a new leader decides from at its term start, from the API
// server (never a cache): every Service, Namespace, IPPool, Gateway and
// GatewayClass, converted as the watcher streams them (pkg/convert), and
// the ledger of namespace, as
// ledger.Open reads it. Services the ledger names that do not exist are
// Gone, as the term start confirms them. It only lists.
func Read(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, namespace string, class objects.Class, gatewayNamespaces []string,
	keepReleased time.Duration) (preview.Inputs, error) {
	index := objects.NewIndex()
	in := preview.Inputs{Env: objects.Env{Objects: index, GatewayServiceNamespaces: gatewayNamespaces},
		PoolSet: &objects.PoolSet{KeepReleased: keepReleased}, Class: class, Now: time.Now()}
	st, err := ledger.Read(ctx, client, namespace)
	if err != nil {
		return in, fmt.Errorf("the ledger (a new leader would stop allocating and report LedgerCorrupt): %w", err)
	}
	in.Ledger = st
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		list, err := client.CoreV1().Services("").List(ctx, opts)
		if err != nil {
			return in, fmt.Errorf("list Services: %w", err)
		}
		for i := range list.Items {
			in.Services = append(in.Services, convert.Service(&list.Items[i]))
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	nss, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("list Namespaces: %w", err)
	}
	for i := range nss.Items {
		index.Add(convert.Namespace(&nss.Items[i]))
	}
	if err := readGateways(ctx, dyn, index); err != nil {
		return in, err
	}
	pools, err := dyn.Resource(convert.IPPoolResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("list IPPools: %w", err)
	}
	for i := range pools.Items {
		p, err := convert.IPPool(&pools.Items[i])
		if err != nil {
			return in, fmt.Errorf("IPPool %s: %w", pools.Items[i].GetName(), err)
		}
		in.Pools = append(in.Pools, p)
	}
	slices.SortFunc(in.Pools, func(a, b *watcherv1.Object) int { return compareNames(a, b) })
	in.Gone = gone(in)
	return in, nil
}

// gone are the Services the ledger names that in does not show, as the
// term start's confirmGone finds them. (One being deleted is shown: the
// passes release it as no longer served.)
func gone(in preview.Inputs) []string {
	present := map[string]bool{}
	for _, s := range in.Services {
		present[objKey(s)] = true
	}
	var out []string
	for _, a := range in.Ledger.Allocations {
		if k := a.Service.Key(); !present[k] && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func objKey(o *watcherv1.Object) string {
	return o.GetMeta().GetNamespace() + "/" + o.GetMeta().GetName()
}

func compareNames(a, b *watcherv1.Object) int {
	switch an, bn := a.GetMeta().GetName(), b.GetMeta().GetName(); {
	case an < bn:
		return -1
	case an > bn:
		return 1
	}
	return 0
}

// readGateways indexes the Gateways and GatewayClasses, which shape the
// requests of the Services serving Gateways; none when the Gateway API's
// CRDs are not installed.
func readGateways(ctx context.Context, dyn dynamic.Interface, index objects.Index) error {
	for _, res := range []schema.GroupVersionResource{convert.GatewayResource, convert.GatewayClassResource} {
		list, err := dyn.Resource(res).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", res.GroupResource(), err)
		}
		for i := range list.Items {
			o, err := convert.Object(&list.Items[i])
			if err != nil {
				return err
			}
			index.Add(o)
		}
	}
	return nil
}
