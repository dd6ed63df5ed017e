package quorum

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestAnswersSayWhatTheAPIServerSaid(t *testing.T) {
	now := metav1.Now()
	stored := map[string]*corev1.Service{
		"prod/web":      {ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web"}},
		"prod/deleting": {ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "deleting", DeletionTimestamp: &now}},
	}
	unavailable := errors.New("etcd leader changed")
	get := func(_ context.Context, key string, opts metav1.GetOptions) (*corev1.Service, error) {
		if opts.ResourceVersion != "" {
			t.Errorf("GET %s with resourceVersion %q: not a quorum read", key, opts.ResourceVersion)
		}
		if key == "prod/flaky" {
			return nil, unavailable
		}
		if s, ok := stored[key]; ok {
			return s, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "services"}, key)
	}
	keys := []string{"prod/web", "prod/deleting", "prod/gone", "prod/flaky"}
	got := GetAll[*corev1.Service](context.Background(), get, keys, 2)
	want := []struct{ exists, gone, err bool }{
		{exists: true},
		{exists: true, gone: true},
		{gone: true},
		{err: true},
	}
	for i, w := range want {
		a := got[i]
		if a.Exists != w.exists || a.Gone() != w.gone || (a.Err != nil) != w.err {
			t.Errorf("%s: exists %v gone %v err %v, want exists %v gone %v err %v", keys[i], a.Exists, a.Gone(), a.Err, w.exists, w.gone, w.err)
		}
		if w.exists && a.Object != stored[keys[i]] {
			t.Errorf("%s: object %v, want the stored one", keys[i], a.Object)
		}
	}
	if !errors.Is(got[3].Err, unavailable) {
		t.Errorf("err %v, want the GET's", got[3].Err)
	}
}
