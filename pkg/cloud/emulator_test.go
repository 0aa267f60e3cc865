package cloud

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/testutil/motoserver"
)

// testConfig polls and batches on a test's time scale: the emulator's state
// changes are instant unless a test sets latencies.
func testConfig() Config {
	return Config{
		BatchMaxDelay:   5 * time.Millisecond,
		PollInterval:    5 * time.Millisecond,
		ColdFirstLook:   5 * time.Millisecond,
		PollMaxInterval: 50 * time.Millisecond,
		// Throttling tests keep their lookups quick too.
		ThrottledPollGrid: 50 * time.Millisecond,
		MaxRetryBackoff:   100 * time.Millisecond,
		// Longer than any eventual consistency a test sets (1 s), short
		// enough that a new snapshot name right after start waits little.
		VisibilityTimeout: 1500 * time.Millisecond,
	}
}

// newCloud starts a Cloud against the backend, closed when the test ends.
// Each call is a fresh process as far as the cloud layer is concerned.
func newCloud(t testing.TB, b testEC2, cfg Config) *ec2Cloud {
	t.Helper()
	if motoserver.Selected() {
		cfg.NoClientTokens = true // moto ignores CreateVolume's ClientToken
	}
	c, err := NewFromAWSConfig(b.AWSConfig("AKIDTEST", "test-secret"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.(*ec2Cloud)
}

// testContext is a context with a deadline, as every CSI call has.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// cutShortDeadline is the deadline of a call a test means to end, unfinished,
// with its context: long enough for the requests before the wait it cuts
// short even on the slowest runner (CI's arm64 tests under qemu-user, niced
// beside the cluster's steps, once took over 300 ms for one AttachVolume).
const cutShortDeadline = 2 * time.Second

// mustCreate creates a volume or fails the test.
func mustCreate(t testing.TB, c Cloud, name string, opts *CreateVolumeOptions) *Volume {
	t.Helper()
	v, err := c.CreateVolume(testContext(t), name, opts)
	if err != nil {
		t.Fatalf("CreateVolume(%s): %v", name, err)
	}
	return v
}

// rawClient is an SDK client on the backend, for setting up state behind
// the cloud layer's back (as an operator or another controller would).
func rawClient(b testEC2) *ec2.Client { return b.EC2Client() }

// wantErr checks that err wraps want (nil: no error).
func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want one wrapping %v", err, want)
	}
}

func TestNewFromAWSConfigRegistersMetrics(t *testing.T) {
	t.Parallel()
	env := startBackend(t, emulatortest.Options{})
	reg := prometheus.NewRegistry()
	cfg := testConfig()
	cfg.Registerer = reg
	c := newCloud(t, env, cfg)
	if _, err := c.AvailabilityZones(testContext(t)); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range families {
		if f.GetName() == "diskplane_cloud_api_requests_total" {
			for _, m := range f.GetMetric() {
				if m.GetLabel()[0].GetValue() == "DescribeAvailabilityZones" && m.GetCounter().GetValue() == 1 {
					found = true
				}
			}
		}
	}
	if !found {
		t.Errorf("no DescribeAvailabilityZones request recorded in %v", families)
	}
	if _, err := NewFromAWSConfig(env.AWSConfig("AKIDTEST", "test-secret"), cfg); err == nil {
		t.Error("a second Cloud registered the same metrics without error")
	}
}
