package leader_test

import (
	"context"
	"testing"

	"github.com/ipledger/ipledger/pkg/leader"
)

func TestStoppingContextEndsWithStoppingOrTheTerm(t *testing.T) {
	for _, tc := range []struct {
		name string
		// graceful stops first (the context stays live while draining);
		// otherwise the term ends first (lost lease).
		graceful bool
	}{
		{name: "graceful", graceful: true},
		{name: "lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			term, stop, end := leader.NewTerm(context.Background(), "me", "me/0/t")
			defer end()
			if err := term.StoppingContext().Err(); err != nil {
				t.Fatalf("StoppingContext of a live term: %v", err)
			}
			if tc.graceful {
				stop()
				if term.Context().Err() != nil {
					t.Fatal("stop ended the term's context")
				}
			} else {
				end()
			}
			select {
			case <-term.StoppingContext().Done():
			default:
				t.Fatal("StoppingContext still live")
			}
		})
	}
}

func TestRecorderOfATermWithoutEventsDiscards(t *testing.T) {
	term, _, end := leader.NewTerm(context.Background(), "me", "me/0/t")
	defer end()
	// Must not panic or block.
	term.Recorder().Event(nil, "Normal", "Reason", "message")
}
