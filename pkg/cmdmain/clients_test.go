package cmdmain

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

func TestClientConfigs(t *testing.T) {
	base := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 100, Burst: 200}
	typed, dyn := ClientConfigs(base)
	// Built-in kinds (EndpointSlices, ConfigMaps, Leases, Events) travel as
	// protobuf: the API server stores them so, and decoding and encoding
	// JSON was most of what a slice or ledger write cost it.
	if typed.ContentType != runtime.ContentTypeProtobuf {
		t.Errorf("typed client sends %q, want %q", typed.ContentType, runtime.ContentTypeProtobuf)
	}
	// IPPools and ExternalWorkloads are custom resources, which the API
	// server serves as JSON only.
	if dyn.ContentType == runtime.ContentTypeProtobuf || dyn.AcceptContentTypes != "" {
		t.Errorf("dynamic client sends %q and accepts %q; custom resources have no protobuf form", dyn.ContentType, dyn.AcceptContentTypes)
	}
	if typed.RateLimiter == nil || typed.RateLimiter != dyn.RateLimiter {
		t.Error("the typed and dynamic clients must draw from one rate limiter (one write budget for the process)")
	}
	if base.ContentType != "" || base.RateLimiter != nil {
		t.Error("ClientConfigs changed the config it was given")
	}
}
