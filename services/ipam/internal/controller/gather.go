package controller

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/quorum"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

// The reads the worker gathers a decision's inputs with, beyond the
// stream: each returns what plan's pure functions take, and decides
// nothing.

// confirmGoneWorkers bounds the concurrent GETs that confirm a Service is
// gone.
const confirmGoneWorkers = 8

// askGone reads each Service of keys from the API server (quorum reads,
// confirmGoneWorkers at a time).
func askGone(ctx context.Context, client kubernetes.Interface, keys []string) []plan.Absence {
	services := func(ctx context.Context, key string, opts metav1.GetOptions) (*corev1.Service, error) {
		ns, name, _ := strings.Cut(key, "/")
		return client.CoreV1().Services(ns).Get(ctx, name, opts)
	}
	answers := quorum.GetAll(ctx, services, keys, confirmGoneWorkers)
	out := make([]plan.Absence, len(keys))
	for i, a := range answers {
		out[i] = plan.Absence{Key: keys[i], Gone: a.Gone(), Err: a.Err}
	}
	return out
}

// checkSuspects reads, for each suspect, both Services from the API
// server: whether the one whose status shows the address still shows it,
// and whether the entry's own Service does (a Service gone shows nothing).
func checkSuspects(ctx context.Context, client kubernetes.Interface, suspects []plan.Suspect) []plan.SuspectCheck {
	shows := func(key string, ip string) (bool, error) {
		ns, name, _ := strings.Cut(key, "/")
		s, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(s.Status.LoadBalancer.Ingress, func(in corev1.LoadBalancerIngress) bool { return in.IP == ip }), nil
	}
	out := make([]plan.SuspectCheck, 0, len(suspects))
	for _, s := range suspects {
		ip := s.Entry.IP.String()
		showerShows, err1 := shows(s.Shows, ip)
		holderShows, err2 := shows(s.Entry.Service.Key(), ip)
		out = append(out, plan.SuspectCheck{Suspect: s, ShowerShows: showerShows, HolderShows: holderShows, Err: errors.Join(err1, err2)})
	}
	return out
}

// held reads what the allocator and the ledger hold for ip.
func held(alloc *allocator.Allocator, ldg *ledger.Ledger, ip netip.Addr) plan.Held {
	var h plan.Held
	h.Alloc, h.InAlloc = alloc.Reservation(ip)
	h.Ledger, h.InLedger = ldg.Reservation(ip)
	return h
}
