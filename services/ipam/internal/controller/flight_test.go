package controller

import (
	"errors"
	"maps"
	"sync"
	"testing"
)

// gatedWrites are writes that return when the test releases them.
type gatedWrites struct {
	mu      sync.Mutex
	started []string
	release map[string]chan error
}

func newGatedWrites(keys ...string) *gatedWrites {
	g := &gatedWrites{release: map[string]chan error{}}
	for _, k := range keys {
		g.release[k] = make(chan error, 1)
	}
	return g
}

func (g *gatedWrites) do(wr *write) writeResult {
	g.mu.Lock()
	g.started = append(g.started, wr.key)
	ch := g.release[wr.key]
	g.mu.Unlock()
	return writeResult{rv: "rv-" + wr.key, err: <-ch}
}

func writesOf(keys ...string) []*write {
	out := make([]*write, 0, len(keys))
	for _, k := range keys {
		out = append(out, &write{key: k})
	}
	return out
}

func TestWritesInFlightHoldTheirServicesUntilTheyLand(t *testing.T) {
	g := newGatedWrites("a/1", "a/2", "b/1")
	f := newWritesInFlight(4)
	if landed := f.launch(writesOf("a/1", "a/2"), g.do); len(landed) != 0 {
		t.Fatalf("a first flight landed %d others", len(landed))
	}
	if !f.hold("a/1", "7") || f.hold("b/1", "") {
		t.Fatal("hold: a/1 is in flight and b/1 is not")
	}
	if len(f.land()) != 0 {
		t.Fatal("a flight landed before its writes returned")
	}
	g.release["a/1"] <- nil
	g.release["a/2"] <- errors.New("etcd timeout")
	<-f.landed
	landed := f.land()
	if len(landed) != 1 {
		t.Fatalf("%d flights landed, want 1", len(landed))
	}
	fl := landed[0]
	if !maps.Equal(fl.held, marks{"a/1": "7"}) {
		t.Errorf("held %v, want a/1 by its update at 7: it was marked while its write was in flight", fl.held)
	}
	if fl.results[0].rv != "rv-a/1" || fl.results[1].err == nil {
		t.Errorf("results %+v: want a/1's version and a/2's error, in the order of the writes", fl.results)
	}
	if f.hold("a/1", "") {
		t.Error("a/1 is still held after its flight landed")
	}
}

func TestWritesInFlightBoundThePassesUnderWay(t *testing.T) {
	g := newGatedWrites("p1", "p2", "p3")
	// Writers to spare: what bounds the passes is maxFlights, not the
	// writers (their limit across passes is pkg/parallel's test).
	f := newWritesInFlight(4)
	f.launch(writesOf("p1"), g.do)
	f.launch(writesOf("p2"), g.do)
	third := make(chan []*flight)
	go func() { third <- f.launch(writesOf("p3"), g.do) }()
	select {
	case <-third:
		t.Fatal("a third pass launched while two were under way")
	default:
	}
	g.release["p1"] <- nil
	landed := <-third
	if len(landed) != 1 || landed[0].writes[0].key != "p1" {
		t.Fatalf("the third launch returned %v, want the first flight, landed", landed)
	}
	g.release["p2"] <- nil
	g.release["p3"] <- nil
	all := f.landAll()
	if len(all) != 2 || all[0].writes[0].key != "p2" || all[1].writes[0].key != "p3" {
		t.Errorf("landAll = %d flights, want p2 then p3", len(all))
	}
}
