package iampolicy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/services/eipd/internal/awsec2"
)

const policyPath = "../../../../deploy/aws/eipd-iam-policy.json"

// clusterTag is what every condition compares with: the role's own tag.
const clusterTag = "${aws:PrincipalTag/ipledger.io/cluster}"

type statement struct {
	Sid         string
	Effect      string
	Action      stringOrList
	NotAction   stringOrList
	Resource    stringOrList
	NotResource stringOrList
	Principal   any
	Condition   map[string]map[string]stringOrList
}

type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*s = many
	return nil
}

// calledActions are the EC2 actions eipd's code can call: the methods of
// awsec2.API, the client's only door to EC2.
func calledActions() []string {
	api := reflect.TypeFor[awsec2.API]()
	var out []string
	for i := range api.NumMethod() {
		out = append(out, "ec2:"+api.Method(i).Name)
	}
	return out
}

func mutating(action string) bool { return !strings.HasPrefix(action, "ec2:Describe") }

func (s statement) cond(op, key string) []string { return s.Condition[op][key] }

// requiredCondition says what a statement allowing a mutating action must
// hold; empty when it does.
func requiredCondition(s statement, action string) string {
	resourceTag := slices.Equal(s.cond("StringEquals", "aws:ResourceTag/ipledger.io/cluster"), []string{clusterTag})
	requestTag := slices.Equal(s.cond("StringEquals", "aws:RequestTag/ipledger.io/cluster"), []string{clusterTag})
	switch action {
	case "ec2:AllocateAddress":
		if !requestTag {
			return "aws:RequestTag/ipledger.io/cluster = " + clusterTag
		}
	case "ec2:CreateTags":
		// Either on an address already the cluster's, or on the address
		// being allocated, tagged for the cluster in the same request.
		atAllocation := slices.Equal(s.cond("StringEquals", "ec2:CreateAction"), []string{"AllocateAddress"}) && requestTag
		if !resourceTag && !atAllocation {
			return "aws:ResourceTag/ipledger.io/cluster = " + clusterTag + ", or ec2:CreateAction = AllocateAddress with aws:RequestTag/ipledger.io/cluster"
		}
	default:
		if !resourceTag {
			return "aws:ResourceTag/ipledger.io/cluster = " + clusterTag
		}
	}
	return ""
}

func TestIAMPolicyGrantsExactlyWhatEipdCalls(t *testing.T) {
	raw, err := os.ReadFile(filepath.FromSlash(policyPath))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Version   string
		Statement []statement
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: %v", policyPath, err)
	}
	if doc.Version != "2012-10-17" {
		t.Errorf("Version = %q, want 2012-10-17 (policy variables such as %s need it)", doc.Version, clusterTag)
	}
	called := calledActions()
	if !slices.Contains(called, "ec2:AssociateAddress") || !slices.Contains(called, "ec2:DescribeInstances") {
		t.Fatalf("awsec2.API lists %v: the derivation of eipd's calls is broken", called)
	}
	allowed := map[string]bool{}
	for _, s := range doc.Statement {
		name := s.Sid
		if s.Effect != "Allow" {
			continue // a Deny grants nothing
		}
		if len(s.NotAction) > 0 || len(s.NotResource) > 0 || s.Principal != nil {
			t.Errorf("statement %s: NotAction/NotResource/Principal grant more than they name", name)
		}
		for _, a := range s.Action {
			if strings.ContainsAny(a, "*?") {
				t.Errorf("statement %s allows %q: no wildcards, name the actions", name, a)
				continue
			}
			if !slices.Contains(called, a) {
				t.Errorf("statement %s allows %s, which eipd never calls (awsec2.API)", name, a)
				continue
			}
			allowed[a] = true
			if !mutating(a) {
				continue
			}
			if want := requiredCondition(s, a); want != "" {
				t.Errorf("statement %s allows %s without the condition %s", name, a, want)
			}
			for _, r := range s.Resource {
				if r == "*" {
					t.Errorf("statement %s allows %s on every resource: name the resource types", name, a)
				}
			}
		}
	}
	for _, a := range called {
		if !allowed[a] {
			t.Errorf("eipd calls %s (awsec2.API) and the policy does not allow it", a)
		}
	}
}

// TestIAMPolicyCheckCatches feeds the checks the mistakes they exist for.
func TestIAMPolicyCheckCatches(t *testing.T) {
	for _, tt := range []struct {
		name   string
		s      statement
		action string
	}{
		{"release without any condition", statement{}, "ec2:ReleaseAddress"},
		{"release conditioned on the request tag only", statement{Condition: map[string]map[string]stringOrList{"StringEquals": {"aws:RequestTag/ipledger.io/cluster": {clusterTag}}}}, "ec2:ReleaseAddress"},
		{"allocate conditioned on the resource tag (which it cannot have yet)", statement{Condition: map[string]map[string]stringOrList{"StringEquals": {"aws:ResourceTag/ipledger.io/cluster": {clusterTag}}}}, "ec2:AllocateAddress"},
		{"create tags with a request tag but not at allocation", statement{Condition: map[string]map[string]stringOrList{"StringEquals": {"aws:RequestTag/ipledger.io/cluster": {clusterTag}}}}, "ec2:CreateTags"},
		{"a hard-coded cluster", statement{Condition: map[string]map[string]stringOrList{"StringEquals": {"aws:ResourceTag/ipledger.io/cluster": {"prod"}}}}, "ec2:AssociateAddress"},
	} {
		if requiredCondition(tt.s, tt.action) == "" {
			t.Errorf("%s: accepted", tt.name)
		}
	}
}
