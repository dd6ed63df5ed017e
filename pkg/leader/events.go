package leader

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Recorder records the term's Events. They are writes like any other: they
// go to the API server with the term's context, and whatever is still
// buffered when the term ends is dropped. Without Config.Events (and for a
// Term from NewTerm) Events are discarded.
func (t *Term) Recorder() record.EventRecorder {
	if t.recorder == nil {
		return discard
	}
	return t.recorder
}

// discard drops every Event (a FakeRecorder without a channel).
var discard record.EventRecorder = &record.FakeRecorder{}

// newTermRecorder starts a broadcaster of the term's own, writing to events
// with ctx (the term's context); stop shuts it down.
func newTermRecorder(ctx context.Context, events typedcorev1.EventsGetter, component string) (rec record.EventRecorder, stop func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&termSink{ctx: ctx, events: events})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component}), b.Shutdown
}

// termSink writes Events with the term's context, so none is sent after
// the term ended.
type termSink struct {
	ctx    context.Context
	events typedcorev1.EventsGetter
}

func (s *termSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	return s.events.Events(e.Namespace).Create(s.ctx, e, metav1.CreateOptions{})
}

func (s *termSink) Update(e *corev1.Event) (*corev1.Event, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	return s.events.Events(e.Namespace).Update(s.ctx, e, metav1.UpdateOptions{})
}

func (s *termSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	return s.events.Events(e.Namespace).Patch(s.ctx, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
