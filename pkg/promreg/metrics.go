// Package promreg is ipledger's one way of registering Prometheus
// collectors: Register for what a component builds once (its constructor
// returns the error), Reuse for what is built again on the same registry
// (a leader term, a work queue, a gRPC server of a test). A nil Registerer
// registers nothing, so tests and tools can build components without one.
package promreg

import (
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers every collector on reg, stopping at the first that
// cannot be (a name registered twice is a programming error; the error
// names the collector).
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metric %s: %w", describe(c), err)
		}
	}
	return nil
}

// Reuse registers c on reg, or returns the equal collector already
// registered there, so that terms, queues and servers can be built again
// and again on one registry. A collector of the same name and another
// shape is a programming error that must not stop the component: c is
// returned, unexported.
func Reuse[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// describe is what c exports (its metrics' descriptions), for an error
// message.
func describe(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var descs []string
	for d := range ch {
		descs = append(descs, d.String())
	}
	return strings.Join(descs, ", ")
}
