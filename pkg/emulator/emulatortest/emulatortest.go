// Package emulatortest runs the EC2 emulator inside a Go test, for every
// package whose tests need a cloud: the cloud layer, the controller and
// node services, the sanity and end-to-end tests.
//
// A test calls Start and gets an Env: the EC2 endpoint URL, the IMDS URL of
// the local instance, the admin URL, an aws-sdk-go-v2 EC2 client pointed at
// the emulator, and direct handles on the model (to look at state) and on
// the faults (to inject throttling, errors, latency, eventual consistency or
// stuck attachments). Everything is torn down with t.Cleanup.
//
//	env := emulatortest.Start(t, emulatortest.Options{})
//	client := env.EC2Client()
//	out, err := client.CreateVolume(ctx, &ec2.CreateVolumeInput{
//		AvailabilityZone: aws.String(env.Zone()), Size: aws.Int32(1), VolumeType: types.VolumeTypeGp3})
//	...
//	if n := env.Calls("DescribeVolumes"); n > 3 { t.Errorf("polled %d times", n) }
//
// By default the emulator keeps state only (no loop devices, no root) and
// every state change takes no time (a new volume is "creating" in the
// CreateVolume answer and "available" at the next Describe), so tests are
// fast and need no sleeps. Options.Latencies makes changes take time;
// Options.Devices backs volumes with real loop devices and by-id links in a
// private directory (root only: the test skips loudly otherwise, and fails
// in CI). Restart simulates killing and restarting the emulator.
package emulatortest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskplane/diskplane/pkg/cloud/sdkhttp"
	"github.com/diskplane/diskplane/pkg/emulator"
	"github.com/diskplane/diskplane/pkg/emulator/ec2api"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/imds"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// Options shape the emulated cloud of one test. The zero value is one
// m5.large instance in us-east-1a, state only, instant state changes, no
// faults.
type Options struct {
	// Devices backs volumes with real loop devices; volumes attached to the
	// local instance appear under LinkDir. Needs root.
	Devices bool
	// LinkDir is where by-id links go; empty means a private temporary
	// directory (never /dev/disk/by-id unless asked for).
	LinkDir string
	// Latencies of the state changes; zero means instant.
	Latencies model.Latencies
	// Region and Zones of the cloud; empty means us-east-1 with a, b, c.
	Region string
	Zones  []model.Zone
	// Instances to declare; empty means one local m5.large in the first zone.
	Instances []model.InstanceSpec
	// ModificationsPerDay is the per-volume modification budget; 0 means
	// EC2's 4, negative means unlimited.
	ModificationsPerDay int
	// ClientTokenTTL is how long a ClientToken is remembered; 0 means
	// model.DefaultClientTokenTTL.
	ClientTokenTTL time.Duration
	// Quotas are the account quotas at start; what it leaves out gets EC2's
	// defaults. Change them later with Env.Cloud().SetQuotas or PatchQuotas
	// (or through the admin API).
	Quotas model.Quotas
	// Faults is the initial fault setting; change it later with
	// Env.Faults().Set or Patch.
	Faults faults.Config
	// RequireIMDSToken makes IMDS refuse IMDSv1 requests.
	RequireIMDSToken bool
	// IAM declares OIDC providers, roles and access keys for the STS and
	// KMS that answer at EC2URL too; change them later with Env.IAM().
	IAM iam.Config
	// KMS declares keys; an encrypted volume's KmsKeyId must name one.
	KMS kms.Config
	// DataDir holds the saved state and the volume images; empty means a
	// private temporary directory. A test whose volumes must fail their
	// I/O (the admin API's device faults) puts it on ext4.
	DataDir string
	// InMemory keeps the state in memory only, as --data-dir= does: every
	// change costs no disk write (long runs with many changes), and
	// Restart starts from an empty cloud. Not with Devices or DataDir.
	InMemory bool
}

// Env is a running emulator for one test.
type Env struct {
	// EC2URL is the EC2 endpoint (AWS_ENDPOINT_URL_EC2).
	EC2URL string
	// IMDSURL is the metadata endpoint of the local instance
	// (AWS_EC2_METADATA_SERVICE_ENDPOINT).
	IMDSURL string
	// AdminURL serves /metrics, /faults, /volumes …
	AdminURL string
	// DataDir holds the saved state (and the volume images with Devices);
	// empty with Options.InMemory.
	DataDir string
	// LinkDir holds the by-id links of attached volumes (with Devices).
	LinkDir string

	cfg     emulator.Config
	current atomic.Pointer[emulator.Emulator]
}

// Start runs an emulator for the test and registers its teardown.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	if opts.Devices {
		testutil.RequireRoot(t)
	}
	if opts.InMemory && (opts.Devices || opts.DataDir != "") {
		t.Fatal("emulatortest: InMemory keeps no state or volume images; it cannot have Devices or a DataDir")
	}
	env := &Env{DataDir: opts.DataDir, LinkDir: opts.LinkDir}
	if env.DataDir == "" && !opts.InMemory {
		env.DataDir = testutil.TempDir(t)
	}
	if opts.Devices && env.LinkDir == "" {
		env.LinkDir = filepath.Join(testutil.TempDir(t), "by-id")
		if err := os.MkdirAll(env.LinkDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env.cfg = emulator.Config{
		Cloud: model.Config{
			Region:              opts.Region,
			Zones:               opts.Zones,
			Instances:           opts.Instances,
			DataDir:             env.DataDir,
			Latencies:           opts.Latencies,
			ModificationsPerDay: opts.ModificationsPerDay,
			ClientTokenTTL:      opts.ClientTokenTTL,
			Quotas:              opts.Quotas,
		},
		Devices: opts.Devices,
		LinkDir: env.LinkDir,
		Faults:  opts.Faults,
		IMDS:    imds.Options{RequireToken: opts.RequireIMDSToken},
		IAM:     opts.IAM,
		KMS:     opts.KMS,
	}
	env.start(t)
	serve := func(pick func(*emulator.Emulator) http.Handler) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			pick(env.current.Load()).ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	env.EC2URL = serve(func(e *emulator.Emulator) http.Handler { return e.EC2 }).URL
	env.IMDSURL = serve(func(e *emulator.Emulator) http.Handler { return e.IMDS }).URL
	env.AdminURL = serve(func(e *emulator.Emulator) http.Handler { return e.Admin }).URL
	return env
}

// start builds an emulator over the env's data directory and makes it the
// current one; the previous one (if any) must be closed already.
func (env *Env) start(t testing.TB) {
	t.Helper()
	e, err := emulator.New(env.cfg)
	if err != nil {
		t.Fatalf("start the EC2 emulator: %v", err)
	}
	env.current.Store(e)
	t.Cleanup(func() {
		if env.current.Load() != e {
			return
		}
		if err := e.Close(); err != nil {
			t.Errorf("close the EC2 emulator: %v", err)
		}
		// Remove every loop device and link the test's volumes still have.
		if err := e.Store.Reconcile(nil); err != nil {
			t.Errorf("remove the emulator's devices: %v", err)
		}
	})
}

// Restart simulates killing the emulator and starting it again on the same
// data directory: the model is dropped without any tidying (its state is
// on disk after every call) and a new one loads the state and reconciles
// the loop devices. The URLs stay the same.
func (env *Env) Restart(t testing.TB) {
	t.Helper()
	old := env.current.Load()
	if err := old.Close(); err != nil {
		t.Fatalf("stop the EC2 emulator: %v", err)
	}
	env.start(t)
}

// Emulator is the running emulator (a new one after each Restart).
func (env *Env) Emulator() *emulator.Emulator { return env.current.Load() }

// Cloud is the running emulator's model, to inspect state directly.
func (env *Env) Cloud() *model.Cloud { return env.current.Load().Cloud }

// Faults is the running emulator's fault injector.
func (env *Env) Faults() *faults.Faults { return env.current.Load().Faults }

// Calls is how many EC2 requests of action the running emulator answered
// (whatever their outcome); CallsWithCode counts one outcome ("Success" or
// an EC2 error code).
func (env *Env) Calls(action string) int { return env.current.Load().Metrics.Count(action, "") }

// CallsWithCode counts the requests of action answered with code.
func (env *Env) CallsWithCode(action, code string) int {
	return env.current.Load().Metrics.Count(action, code)
}

// Metrics is the running emulator's EC2 request metrics: CountReads tells
// a driver's lookups by ID from those by filter.
func (env *Env) Metrics() *ec2api.Metrics { return env.current.Load().Metrics }

// IAM is the running emulator's identities (OIDC providers, roles, access
// keys and the sessions STS issued).
func (env *Env) IAM() *iam.Store { return env.current.Load().IAM }

// Keys is the running emulator's KMS keys.
func (env *Env) Keys() *kms.Store { return env.current.Load().Keys }

// ServiceCalls counts the STS or KMS requests of action ("sts",
// "AssumeRoleWithWebIdentity"; "kms", "Decrypt") the running emulator
// answered with code; an empty code counts every outcome.
func (env *Env) ServiceCalls(service, action, code string) int {
	return env.current.Load().Services.Count(service, action, code)
}

// LocalInstance is the instance the test's host plays.
func (env *Env) LocalInstance() model.Instance {
	in, _, _ := env.Cloud().LocalInstance()
	return in
}

// Zone is the local instance's zone.
func (env *Env) Zone() string { return env.LocalInstance().Zone }

// Region is the emulated region.
func (env *Env) Region() string { return env.Cloud().Region() }

// EC2Client returns an aws-sdk-go-v2 EC2 client for the emulator with
// static credentials, in the emulated region, using HTTPClient. optFns
// adjust its options (e.g. the retryer).
func (env *Env) EC2Client(optFns ...func(*ec2.Options)) *ec2.Client {
	return ec2.New(ec2.Options{
		Region:       env.Region(),
		BaseEndpoint: aws.String(env.EC2URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEMULATOR", "emulator-secret", ""),
		HTTPClient:   HTTPClient(),
	}, optFns...)
}

// AWSConfig returns an SDK configuration for the emulator's EC2, STS and
// KMS (all at EC2URL) in the emulated region, using HTTPClient. It signs
// with this access key (one the IAM document declares, for KMS), or, with
// an empty accessKeyID, carries no credentials: a node's configuration,
// whose only call, STS AssumeRoleWithWebIdentity, is unsigned.
func (env *Env) AWSConfig(accessKeyID, secretAccessKey string) aws.Config {
	cfg := aws.Config{Region: env.Region(), BaseEndpoint: aws.String(env.EC2URL), HTTPClient: HTTPClient()}
	if accessKeyID != "" {
		cfg.Credentials = credentials.NewStaticCredentialsProvider(accessKeyID, secretAccessKey, "")
	}
	return cfg
}

// HTTPClient returns an HTTP client for aws-sdk-go-v2 clients of a local
// emulator (ec2.Options.HTTPClient, or config.WithHTTPClient). It sends
// request bodies the way the cloud layer does (pkg/cloud/sdkhttp), which a
// fast, nearby endpoint needs.
func HTTPClient() *http.Client {
	return &http.Client{Transport: sdkhttp.Transport(http.DefaultTransport.(*http.Transport).Clone())}
}

// Environ is the environment a process needs to use the emulator through
// the SDK's standard configuration (endpoint, IMDS, region, credentials).
func (env *Env) Environ() map[string]string {
	return map[string]string{
		"AWS_ENDPOINT_URL_EC2":              env.EC2URL,
		"AWS_ENDPOINT_URL_STS":              env.EC2URL,
		"AWS_ENDPOINT_URL_KMS":              env.EC2URL,
		"AWS_EC2_METADATA_SERVICE_ENDPOINT": env.IMDSURL,
		"AWS_REGION":                        env.Region(),
		"AWS_ACCESS_KEY_ID":                 "AKIDEMULATOR",
		"AWS_SECRET_ACCESS_KEY":             "emulator-secret",
	}
}

// Setenv sets Environ for the rest of the test (not for parallel tests).
func (env *Env) Setenv(t testing.TB) {
	t.Helper()
	for k, v := range env.Environ() {
		t.Setenv(k, v)
	}
}
