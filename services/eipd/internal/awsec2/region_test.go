package awsec2_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/services/eipd/internal/awsec2"
)

// imds serves the two calls of the SDK's IMDSv2 region lookup, as an EC2
// instance's metadata service does.
func imds(t *testing.T, region string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
			_, _ = w.Write([]byte("token"))
		case r.Method == http.MethodGet && r.URL.Path == "/latest/meta-data/placement/region" && r.Header.Get("X-Aws-Ec2-Metadata-Token") == "token":
			_, _ = w.Write([]byte(region))
		case r.Method == http.MethodGet && r.URL.Path == "/latest/dynamic/instance-identity/document" && r.Header.Get("X-Aws-Ec2-Metadata-Token") == "token":
			_, _ = w.Write([]byte(`{"region": "` + region + `", "instanceId": "i-0123456789abcdef0"}`))
		default:
			t.Logf("IMDS: %s %s", r.Method, r.URL.Path)
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestRegionResolution: AWS_REGION wins; without it, the region comes from
// the instance metadata service of the node eipd runs on; without either,
// eipd says what to set.
func TestRegionResolution(t *testing.T) {
	tests := []struct {
		name, envRegion, imdsRegion string
		imdsOff                     bool
		want, wantErr               string
	}{
		{name: "AWS_REGION", envRegion: "eu-central-1", imdsRegion: "ap-south-1", want: "eu-central-1"},
		{name: "instance metadata", imdsRegion: "ap-south-1", want: "ap-south-1"},
		{name: "neither", imdsOff: true, wantErr: "set AWS_REGION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
			t.Setenv("AWS_DEFAULT_REGION", "")
			t.Setenv("AWS_REGION", tt.envRegion)
			t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds(t, tt.imdsRegion))
			t.Setenv("AWS_EC2_METADATA_DISABLED", map[bool]string{true: "true", false: "false"}[tt.imdsOff])
			c, err := awsec2.New(context.Background(), "region-test", awsec2.Config{}, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Region(); got != tt.want {
				t.Fatalf("region = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestClusterIDMustBeExact(t *testing.T) {
	for id, want := range map[string]string{
		"":                       "--cluster-id is required",
		"prod-*":                 "wildcards",
		"prod-?":                 "wildcards",
		`prod\1`:                 "wildcards",
		"prod-eu-1":              "",
		strings.Repeat("x", 256): "at most 255",
	} {
		err := awsec2.ValidateClusterID(id)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateClusterID(%q) = %v, want %q", id, err, want)
		}
	}
}
