package convert

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCarriedAnnotationsAreExact: only the keys of CarriedAnnotations are
// carried, not everything under their prefixes, and each names who reads it,
// on what, and what it means.
func TestCarriedAnnotationsAreExact(t *testing.T) {
	for k, a := range CarriedAnnotations {
		if a.ReadBy == "" || a.On == "" || a.Meaning == "" {
			t.Errorf("%s: %+v names no reader, kind or meaning", k, a)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{
		"ipledger.io/loadBalancerIPs":                      "192.0.2.1",
		"ipledger.io/unknown":                              "x",
		"metallb.io/ip-allocated-from-pool":                "p",
		"lbipam.cilium.io/other":                           "x",
		"endpoints.kubernetes.io/other":                    "x",
		"kubectl.kubernetes.io/last-applied-configuration": "{}",
	}}}
	got := Service(svc).GetMeta().GetAnnotations()
	if len(got) != 1 || got["ipledger.io/loadBalancerIPs"] != "192.0.2.1" {
		t.Errorf("carried %v, want only ipledger.io/loadBalancerIPs", got)
	}
}

// TestBoundedMetadata: a carried annotation value longer than
// MaxAnnotationBytes becomes its marker, which tells its size and keeps
// equal values equal; labels larger than MaxLabelBytes become the one
// LabelsTruncatedLabel; both are carried unchanged when converted again.
func TestBoundedMetadata(t *testing.T) {
	long := strings.Repeat("k", MaxAnnotationBytes+1)
	manyLabels := map[string]string{}
	for i := 0; LabelBytes(manyLabels) <= MaxLabelBytes; i++ {
		manyLabels[fmt.Sprintf("feature.node.kubernetes.io/f-%05d", i)] = strings.Repeat("v", 63)
	}
	size := LabelBytes(manyLabels)
	fitting := map[string]string{"app": "a", "team": strings.Repeat("t", 63)}
	tests := []struct {
		name       string
		ann        map[string]string
		labels     map[string]string
		wantAnn    map[string]string
		wantLabels map[string]string
	}{
		{name: "at the limits: carried as they are",
			ann:     map[string]string{"ipledger.io/allow-shared-ip": long[:MaxAnnotationBytes]},
			labels:  fitting,
			wantAnn: map[string]string{"ipledger.io/allow-shared-ip": long[:MaxAnnotationBytes]}, wantLabels: fitting},
		{name: "a value over the limit: its marker",
			ann:     map[string]string{"ipledger.io/allow-shared-ip": long, "ipledger.io/address-pool": "p"},
			wantAnn: map[string]string{"ipledger.io/allow-shared-ip": TruncatedAnnotation(long), "ipledger.io/address-pool": "p"}},
		{name: "an unknown value over the limit: dropped",
			ann: map[string]string{"ipledger.io/unknown": long}},
		{name: "labels over the limit: the one marker label",
			labels: manyLabels, wantLabels: map[string]string{LabelsTruncatedLabel: fmt.Sprint(size)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: tt.ann, Labels: tt.labels}}
			meta := Node(n).GetMeta()
			if fmt.Sprint(meta.GetAnnotations()) != fmt.Sprint(tt.wantAnn) || fmt.Sprint(meta.GetLabels()) != fmt.Sprint(tt.wantLabels) {
				t.Fatalf("annotations %.200v labels %.200v, want %.200v and %.200v", meta.GetAnnotations(), meta.GetLabels(), tt.wantAnn, tt.wantLabels)
			}
			again := Node(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: meta.GetAnnotations(), Labels: meta.GetLabels()}}).GetMeta()
			if fmt.Sprint(again.GetAnnotations()) != fmt.Sprint(meta.GetAnnotations()) || fmt.Sprint(again.GetLabels()) != fmt.Sprint(meta.GetLabels()) {
				t.Errorf("converted again: %v %v", again.GetAnnotations(), again.GetLabels())
			}
		})
	}
	if n, ok := ParseTruncated(TruncatedAnnotation(long)); !ok || n != len(long) {
		t.Errorf("ParseTruncated(marker) = %d, %t, want %d", n, ok, len(long))
	}
	if _, ok := ParseTruncated("192.0.2.1"); ok {
		t.Error("an address parses as a marker")
	}
	if TruncatedAnnotation(long) == TruncatedAnnotation(strings.Repeat("j", len(long))) {
		t.Error("two different values of one length have one marker")
	}
	if len(TruncatedAnnotation(long)) > MaxAnnotationBytes {
		t.Error("the marker itself is over the limit")
	}
	if n, ok := LabelsTruncated(map[string]string{LabelsTruncatedLabel: "40000"}); !ok || n != 40000 {
		t.Errorf("LabelsTruncated = %d, %t", n, ok)
	}
	if _, ok := LabelsTruncated(map[string]string{LabelsTruncatedLabel: "40000", "app": "a"}); ok {
		t.Error("a user's label of that name among others reads as the marker")
	}
}

// FuzzParseTruncated: the marker parser (it reads user-written annotation
// values) never panics, and reads every marker back.
func FuzzParseTruncated(f *testing.F) {
	f.Add("ipledger.io/truncated:12:ab")
	f.Add("ipledger.io/truncated:")
	f.Add("10.0.0.1")
	f.Fuzz(func(t *testing.T, v string) {
		_, _ = ParseTruncated(v)
		if n, ok := ParseTruncated(TruncatedAnnotation(v)); !ok || n != len(v) {
			t.Errorf("marker of %q reads back as %d, %t", v, n, ok)
		}
	})
}
