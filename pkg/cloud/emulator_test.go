package cloud

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
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

// awsConfig is an SDK configuration for the emulator with static credentials.
func awsConfig(env *emulatortest.Env) aws.Config {
	return aws.Config{
		Region:       env.Region(),
		BaseEndpoint: aws.String(env.EC2URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
	}
}

// newCloud starts a Cloud against the emulator, closed when the test ends.
// Each call is a fresh process as far as the cloud layer is concerned.
func newCloud(t testing.TB, env *emulatortest.Env, cfg Config) *ec2Cloud {
	t.Helper()
	c, err := NewFromAWSConfig(awsConfig(env), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.(*ec2Cloud)
}

// start runs an emulator and a Cloud with the test configuration.
func start(t testing.TB, opts emulatortest.Options) (*ec2Cloud, *emulatortest.Env) {
	t.Helper()
	env := emulatortest.Start(t, opts)
	return newCloud(t, env, testConfig()), env
}

// testContext is a context with a deadline, as every CSI call has.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustCreate creates a volume or fails the test.
func mustCreate(t testing.TB, c Cloud, name string, opts *CreateVolumeOptions) *Volume {
	t.Helper()
	v, err := c.CreateVolume(testContext(t), name, opts)
	if err != nil {
		t.Fatalf("CreateVolume(%s): %v", name, err)
	}
	return v
}

// rawClient is an SDK client on the emulator, for setting up state behind
// the cloud layer's back (as an operator or another controller would).
func rawClient(env *emulatortest.Env) *ec2.Client { return env.EC2Client() }

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
	env := emulatortest.Start(t, emulatortest.Options{})
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
	if _, err := NewFromAWSConfig(awsConfig(env), cfg); err == nil {
		t.Error("a second Cloud registered the same metrics without error")
	}
}
