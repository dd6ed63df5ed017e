package controlplane

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
)

// auditPolicy records, at Metadata level (who, verb, resource, answer; no
// bodies), the requests for ipledger's API groups, and nothing else: enough
// for a test to prove who did what through the aggregated API, at no cost to
// the tests that measure the API server.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources:
      - group: api.ipledger.io
      - group: ipledger.io
  - level: None
`

// audit writes the policy and returns the flags of a JSON audit log at
// AuditLogPath, written before the response is sent (blocking), so that a
// test reading it after an answer finds the entry.
func audit(dir string) ([]string, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + filepath.Join(dir, "audit.log"),
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--audit-log-maxbackup=1",
		"--audit-log-maxsize=100",
	}, nil
}

// AuditLogPath is the kube-apiserver's audit log (JSON lines, one
// audit.k8s.io/v1 Event each).
func (cp *ControlPlane) AuditLogPath() string { return filepath.Join(cp.Dir, "audit.log") }

// AuditEvent is the part of an audit.k8s.io/v1 Event tests look at.
type AuditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	Stage      string `json:"stage"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ObjectRef *struct {
		Resource   string `json:"resource"`
		Namespace  string `json:"namespace"`
		Name       string `json:"name"`
		APIGroup   string `json:"apiGroup"`
		APIVersion string `json:"apiVersion"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// AuditEvents reads the audit log (empty when nothing was logged yet).
func (cp *ControlPlane) AuditEvents() ([]AuditEvent, error) {
	f, err := os.Open(cp.AuditLogPath())
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, sc.Err()
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
