package cloud

import (
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/version"
)

// isolateSDK keeps the SDK's standard chain away from the machine's own
// AWS files and instance metadata.
func isolateSDK(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
}

// TestNewUsesTheStandardChain configures the Cloud only through the
// environment, as a Deployment does: region, endpoint and credentials.
func TestNewUsesTheStandardChain(t *testing.T) {
	isolateSDK(t)
	env := setenvBackend(t)
	c, err := New(testContext(t), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	v := mustCreate(t, c, "pvc-env", &CreateVolumeOptions{SizeGiB: 1})
	if n := len(namedVolumes(t, env)["pvc-env"]); n != 1 || v.Zone == "" {
		t.Errorf("volume %+v; EC2 holds %d such volumes", v, n)
	}
	if err := c.HealthCheck(testContext(t)); err != nil {
		t.Errorf("HealthCheck: %v", err)
	}
}

func TestNewFindsTheRegion(t *testing.T) {
	emulatorOnly(t, "serves no instance metadata (IMDS) to find the region in")
	env := emulatortest.Start(t, emulatortest.Options{})
	tests := []struct {
		name     string
		override string
		environ  map[string]string
		wantErr  bool
	}{
		{"from the instance metadata service", "", map[string]string{
			"AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": env.IMDSURL}, false},
		{"from the configuration", env.Region(), nil, false},
		{"nowhere", "", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			isolateSDK(t)
			env.Setenv(t)
			t.Setenv("AWS_REGION", "")
			t.Setenv("AWS_DEFAULT_REGION", "")
			for k, v := range tc.environ {
				t.Setenv(k, v)
			}
			cfg := testConfig()
			cfg.Region = tc.override
			c, err := New(testContext(t), cfg)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
					t.Errorf("New = %v, want an error that says to set AWS_REGION", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			if _, err := c.AvailabilityZones(testContext(t)); err != nil {
				t.Error(err)
			}
			if got := c.(*ec2Cloud).ec2.Options().Region; got != env.Region() {
				t.Errorf("region %q, want %q", got, env.Region())
			}
		})
	}
}

// headerRecorder is the HTTP client the SDK uses, keeping the user agents
// of the requests it sends.
type headerRecorder struct {
	mu     sync.Mutex
	agents []string
}

func (h *headerRecorder) Do(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.agents = append(h.agents, req.Header.Get("User-Agent"))
	h.mu.Unlock()
	return http.DefaultClient.Do(req)
}

func TestUserAgentNamesDiskplane(t *testing.T) {
	t.Parallel()
	env := startBackend(t, emulatortest.Options{})
	rec := &headerRecorder{}
	awsCfg := env.AWSConfig("AKIDTEST", "test-secret")
	awsCfg.HTTPClient = rec
	cfg := testConfig()
	cfg.UserAgentExtra = "helm"
	c, err := NewFromAWSConfig(awsCfg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.AvailabilityZones(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if len(rec.agents) == 0 {
		t.Fatal("no request went through the recorder")
	}
	for _, ua := range rec.agents {
		if !strings.Contains(ua, "diskplane/"+version.Version()) || !strings.Contains(ua, "helm") {
			t.Errorf("user agent %q names neither diskplane/%s nor the extra", ua, version.Version())
		}
	}
}

func TestHealthCheck(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, "has no fault injection to deny or fail DescribeAvailabilityZones")
	env := emulatortest.Start(t, emulatortest.Options{})
	denied := faults.Config{Unauthorized: []string{"DescribeAvailabilityZones"}}

	fresh := newCloud(t, env, testConfig())
	if err := env.Faults().Set(denied); err != nil {
		t.Fatal(err)
	}
	wantErr(t, fresh.HealthCheck(testContext(t)), ErrPermissionDenied)
	wantErr(t, fresh.HealthCheck(testContext(t)), ErrPermissionDenied) // failures are not cached
	if err := env.Faults().Set(faults.Config{}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, fresh.HealthCheck(testContext(t)), nil)

	// A success is reused for HealthCheckInterval.
	cfg := testConfig()
	cfg.HealthCheckInterval = time.Hour
	cached := newCloud(t, env, cfg)
	wantErr(t, cached.HealthCheck(testContext(t)), nil)
	before := env.Calls("DescribeAvailabilityZones")
	if err := env.Faults().Set(denied); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		wantErr(t, cached.HealthCheck(testContext(t)), nil)
	}
	if n := env.Calls("DescribeAvailabilityZones") - before; n != 0 {
		t.Errorf("%d calls within the cache interval, want 0", n)
	}
	// The probe itself does not retry, so a down endpoint answers at once.
	if err := env.Faults().Set(faults.Config{Errors: []faults.ErrorRule{{Action: "*", Code: faults.CodeUnavailable, Probability: 1}}}); err != nil {
		t.Fatal(err)
	}
	before = env.Calls("DescribeAvailabilityZones")
	wantErr(t, newCloud(t, env, testConfig()).HealthCheck(testContext(t)), ErrUnavailable)
	if n := env.Calls("DescribeAvailabilityZones") - before; n != 1 {
		t.Errorf("the health check sent %d requests, want 1", n)
	}
}

func TestAvailabilityZones(t *testing.T) {
	t.Parallel()
	c, env := start(t, emulatortest.Options{})
	zones, err := c.AvailabilityZones(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	want := describedZones(t, env)
	if len(zones) != len(want) {
		t.Fatalf("zones %v, want %v", zones, want)
	}
	for i, z := range zones {
		if z.Name != want[i].Name || z.ID != want[i].ID {
			t.Errorf("zone %d = %+v, want %+v", i, z, want[i])
		}
	}
	if _, err := c.AvailabilityZones(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if n := env.Calls("DescribeAvailabilityZones"); n != 2 {
		t.Errorf("%d DescribeAvailabilityZones calls, the test's own included; want 2: the list should be cached", n)
	}
}
