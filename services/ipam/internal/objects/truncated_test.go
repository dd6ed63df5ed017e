package objects

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
)

// TestTruncatedRequestRefused: a request the watcher could not carry whole
// (an annotation ipam reads over convert.MaxAnnotationBytes, which arrives
// as its marker; a Service's or its Namespace's labels over
// convert.MaxLabelBytes) is refused as invalid, naming the annotation or the
// labels and the limit; a marker under a key ipam does not read as a request
// refuses nothing.
func TestTruncatedRequestRefused(t *testing.T) {
	marker := convert.TruncatedAnnotation(strings.Repeat("x", 300_000))
	labels := map[string]string{convert.LabelsTruncatedLabel: "40000"}
	limit := fmt.Sprint(convert.MaxAnnotationBytes)
	tests := []struct {
		name        string
		annotations map[string]string
		labels      map[string]string
		nsLabels    map[string]string
		want        []string // in the message; none: no error
	}{
		{name: "a fitting request", annotations: map[string]string{allocator.AnnotationAddressPool: "p"}},
		{name: "ipledger.io/address-pool", annotations: map[string]string{allocator.AnnotationAddressPool: marker},
			want: []string{"annotation ipledger.io/address-pool", "300000 bytes", limit}},
		{name: "MetalLB's spelling", annotations: map[string]string{"metallb.universe.tf/loadBalancerIPs": marker},
			want: []string{"annotation metallb.universe.tf/loadBalancerIPs", limit}},
		{name: "Cilium's sharing key", annotations: map[string]string{"lbipam.cilium.io/sharing-key": marker},
			want: []string{"annotation lbipam.cilium.io/sharing-key", limit}},
		{name: "ipam's own allocated-from-pool is no request", annotations: map[string]string{allocator.AnnotationAllocatedFromPool: marker}},
		{name: "the Service's labels", labels: labels,
			want: []string{"the Service's labels are 40000 bytes", fmt.Sprint(convert.MaxLabelBytes)}},
		{name: "its Namespace's labels", nsLabels: labels,
			want: []string{"Namespace n are 40000 bytes", fmt.Sprint(convert.MaxLabelBytes)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := service("LoadBalancer", "", false)
			o.Meta.Annotations, o.Meta.Labels = tt.annotations, tt.labels
			ns := &watcherv1.Object{Kind: watcherv1.Kind_KIND_NAMESPACE, Meta: &watcherv1.ObjectMeta{Name: "n", Labels: tt.nsLabels}}
			_, err := Request(o, Env{Objects: NewIndex(ns)})
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Request() error = %v, want none", err)
				}
				return
			}
			var ae *allocator.Error
			if !errors.As(err, &ae) || ae.Reason != allocator.ReasonInvalidRequest {
				t.Fatalf("Request() error = %v, want %s", err, allocator.ReasonInvalidRequest)
			}
			for _, w := range tt.want {
				if !strings.Contains(ae.Message, w) {
					t.Errorf("message %q does not say %q", ae.Message, w)
				}
			}
		})
	}
}

// TestEveryRequestAnnotationIsCarried: the watcher carries every annotation
// ipam reads as a request; one left out of convert.CarriedAnnotations would
// be dropped before ipam sees it.
func TestEveryRequestAnnotationIsCarried(t *testing.T) {
	for _, k := range append(allocator.RequestAnnotations(), allocator.AnnotationAllocatedFromPool) {
		if _, ok := convert.CarriedAnnotations[k]; !ok {
			t.Errorf("ipam reads %s, which convert.CarriedAnnotations leaves out", k)
		}
	}
}
