package allocator

import (
	"fmt"
	"slices"
)

// Selector is a Kubernetes label selector (matchLabels AND matchExpressions).
// An empty Selector matches everything.
type Selector struct {
	MatchLabels      map[string]string
	MatchExpressions []SelectorRequirement
}

// SelectorRequirement is one matchExpressions entry.
type SelectorRequirement struct {
	Key      string
	Operator SelectorOperator
	Values   []string
}

// SelectorOperator is a matchExpressions operator.
type SelectorOperator string

// The supported operators.
const (
	OpIn           SelectorOperator = "In"
	OpNotIn        SelectorOperator = "NotIn"
	OpExists       SelectorOperator = "Exists"
	OpDoesNotExist SelectorOperator = "DoesNotExist"
)

// Matches reports whether labels satisfy the selector.
func (s Selector) Matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, e := range s.MatchExpressions {
		v, ok := labels[e.Key]
		switch e.Operator {
		case OpIn:
			if !ok || !slices.Contains(e.Values, v) {
				return false
			}
		case OpNotIn:
			if ok && slices.Contains(e.Values, v) {
				return false
			}
		case OpExists:
			if !ok {
				return false
			}
		case OpDoesNotExist:
			if ok {
				return false
			}
		default:
			return false // validate rejects it; never match what we cannot read
		}
	}
	return true
}

// validate checks the operators and their values; field names the selector
// in errors ("spec.allocation.namespaceSelectors[0]").
func (s Selector) validate(field string) error {
	for i, e := range s.MatchExpressions {
		f := fmt.Sprintf("%s.matchExpressions[%d]", field, i)
		if e.Key == "" {
			return fmt.Errorf("%s: key is empty", f)
		}
		switch e.Operator {
		case OpIn, OpNotIn:
			if len(e.Values) == 0 {
				return fmt.Errorf("%s: operator %s needs at least one value", f, e.Operator)
			}
		case OpExists, OpDoesNotExist:
			if len(e.Values) != 0 {
				return fmt.Errorf("%s: operator %s takes no values; remove values", f, e.Operator)
			}
		default:
			return fmt.Errorf("%s: unknown operator %q, want In, NotIn, Exists or DoesNotExist", f, e.Operator)
		}
	}
	return nil
}

func anyMatches(sels []Selector, labels map[string]string) bool {
	for _, s := range sels {
		if s.Matches(labels) {
			return true
		}
	}
	return false
}
