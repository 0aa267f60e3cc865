package cloud

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud/apimetrics"
	"github.com/diskplane/diskplane/pkg/cloud/devicenames"
	"github.com/diskplane/diskplane/pkg/cloud/sdkhttp"
	"github.com/diskplane/diskplane/pkg/version"
)

// Config tunes the EC2 implementation of Cloud. The zero value suits
// production: every zero field takes the default named in its comment.
// Where EC2 is, and with which credentials, is not configured here: that
// comes from the SDK's standard chain (see New).
type Config struct {
	// Region overrides the region the SDK finds (AWS_REGION, the shared
	// config file, or the instance metadata service).
	Region string
	// UserAgentExtra is appended to the user agent, e.g. "helm", so EC2's
	// logs (CloudTrail) show how this Diskplane was installed.
	UserAgentExtra string
	// Registerer receives the EC2 API metrics; nil registers none.
	Registerer prometheus.Registerer

	// BatchMaxDelay is the longest a Describe lookup waits for others to
	// join its batch (default 200ms): how long it may wait behind a call
	// still under way. Longer means fewer EC2 calls under load.
	BatchMaxDelay time.Duration
	// BatchIdleDelay is how long a Describe lookup gathers others when no
	// call of its kind is under way (default 5ms): enough for the pollers a
	// poll tick wakes together to share one call, without adding a window
	// to every lookup.
	BatchIdleDelay time.Duration
	// DisableBatching sends every Describe lookup on its own.
	DisableBatching bool

	// PollInterval is the first pause between the looks of a wait that
	// cannot time its change (one found under way, a snapshot, EC2's reads
	// catching up; default 250ms); the pause grows by half each time. A wait
	// for a change this process asked for is first looked at when the
	// changes of its kind recently took (see lookSchedule).
	PollInterval time.Duration
	// ColdFirstLook is when a wait for a kind of change no wait of this
	// process has seen yet first looks, after the request (default 100ms).
	// Each look after it comes half as late again after the request (see
	// lookSchedule): the first waits after a start find out EC2's speed,
	// fast or slow, within a few looks, which the waits of the same moment
	// share.
	ColdFirstLook time.Duration
	// PollStep is the shortest step between two looks of a wait (default
	// 100ms). The window of a wait's first look at a change's estimated
	// time ends a tenth of the estimate and half a PollStep after it, so
	// that waits due about then share a call.
	PollStep time.Duration
	// ThrottledPollGrid aligns the waits' looks while EC2 throttles this
	// process's requests or fails them with server errors, until 30s after
	// the last such answer (default 1s). Requests the SDK holds back or
	// retries then leave one by one, so the waits after them fall due too
	// far apart to share their looks; the grid gathers them, and the
	// lookups requests begin with, into fewer Describe calls for at most
	// this much more latency per wait and per request.
	ThrottledPollGrid time.Duration
	// PollMaxInterval caps the step between two looks of a wait (default
	// 5s), so a slow change is still noticed within seconds of happening.
	PollMaxInterval time.Duration
	// AttachStuckTimeout: an attachment still "attaching" this long after it
	// began is detached and reported as an error, so the next retry starts
	// clean instead of waiting forever (default 90s).
	AttachStuckTimeout time.Duration
	// VisibilityTimeout bounds EC2's eventual consistency: how long after
	// the request that made it a volume, snapshot or modification may be
	// missing from EC2's reads (default 2m). A volume still missing that long
	// after CreateVolume was sent is taken to be gone; until that long after
	// a request that may have made something, a lookup that finds nothing
	// does not allow making it again. Measured by the controller's clock.
	VisibilityTimeout time.Duration
	// ClientTokenMemory is how long EC2 is trusted to remember the
	// ClientToken of a CreateVolume or CopyVolumes after the request
	// (default 1h; EC2 documents at least 24 hours for RunInstances'
	// tokens, and is seen to keep CreateVolume's for about 12). A create
	// looks its name up first only when a volume may carry it whose token
	// is forgotten: one that a listing of the named volumes, made at most
	// this less VisibilityTimeout ago, names (see volumeNameIndex). Setting
	// it longer than the cloud's memory risks a second volume for a name.
	ClientTokenMemory time.Duration
	// NoClientTokens says that the cloud ignores ClientToken (moto does):
	// every create looks its name up first, and only that lookup keeps a
	// retry from making a second volume.
	NoClientTokens bool
	// MaxRetryBackoff caps the pause between retries of one EC2 call
	// (default 10s). The number of retries is bounded only by the context.
	MaxRetryBackoff time.Duration
	// DefaultTimeout bounds a call whose context has no deadline, so nothing
	// can hang forever (default 5m). CSI sidecars always set a deadline.
	DefaultTimeout time.Duration
	// HealthCheckInterval is how long a successful health check is reused
	// before EC2 is asked again (default 1m).
	HealthCheckInterval time.Duration
	// ZoneCacheTTL is how long the list of availability zones is reused
	// (default 10m).
	ZoneCacheTTL time.Duration
	// DeviceNameRejectionTTL is how long a device name EC2 refused as in use
	// is avoided on that instance (default 1h).
	DeviceNameRejectionTTL time.Duration
	// DeviceNamesTTL is how long the device names an instance's
	// DescribeInstances listed are reused by the next attaches to it
	// (default 1m); a name EC2 refuses as in use ends the reuse at once.
	DeviceNamesTTL time.Duration
}

// DefaultVisibilityTimeout is Config.VisibilityTimeout's default: EC2's
// reads usually catch up within seconds; two minutes covers its slow days.
const DefaultVisibilityTimeout = 2 * time.Minute

// DefaultClientTokenMemory is Config.ClientTokenMemory's default, well
// within what EC2 keeps.
const DefaultClientTokenMemory = time.Hour

// nameIndexMaxAge is how long a listing of the named volumes serves
// CreateVolume (see volumeNameIndex): zero, none at all, when the cloud
// keeps no tokens or keeps them no longer than its reads may lag.
func (c Config) nameIndexMaxAge() time.Duration {
	if c.NoClientTokens {
		return 0
	}
	return max(c.ClientTokenMemory-c.VisibilityTimeout, 0)
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.BatchMaxDelay, 200*time.Millisecond)
	def(&c.BatchIdleDelay, 5*time.Millisecond)
	def(&c.PollInterval, 250*time.Millisecond)
	def(&c.ColdFirstLook, 100*time.Millisecond)
	def(&c.PollStep, 100*time.Millisecond)
	def(&c.ThrottledPollGrid, time.Second)
	def(&c.PollMaxInterval, 5*time.Second)
	def(&c.AttachStuckTimeout, 90*time.Second)
	def(&c.VisibilityTimeout, DefaultVisibilityTimeout)
	def(&c.ClientTokenMemory, DefaultClientTokenMemory)
	def(&c.MaxRetryBackoff, 10*time.Second)
	def(&c.DefaultTimeout, 5*time.Minute)
	def(&c.HealthCheckInterval, time.Minute)
	def(&c.ZoneCacheTTL, 10*time.Minute)
	def(&c.DeviceNameRejectionTTL, time.Hour)
	def(&c.DeviceNamesTTL, time.Minute)
	c.PollMaxInterval = max(c.PollMaxInterval, c.PollInterval)
	c.BatchIdleDelay = min(c.BatchIdleDelay, c.BatchMaxDelay)
	return c
}

// ec2Cloud implements Cloud over the EC2 API.
type ec2Cloud struct {
	cfg     Config
	ec2     *ec2.Client
	retry   *retryers
	devices *devicenames.Allocator
	// inUse is what each instance's last DescribeInstances listed.
	inUse   *devicesInUse
	lookups *lookups
	// latencies learns how long EC2's state changes take (waitTransition).
	latencies *latencies
	// watches hands the waits for volumes what DescribeVolumes shows of
	// them (waitVolume).
	watches volumeWatches
	// throttles knows whether EC2 throttles this process now (throttledGrid).
	throttles *throttleClock
	sends     *sendLog
	// names spares creates the lookup of a new name (CreateVolume).
	names  *volumeNameIndex
	tokens *tokenHints
	zones  cached[[]Zone]
	health cached[struct{}]
}

var _ Cloud = (*ec2Cloud)(nil)

// New returns the Cloud for the EC2 API that the SDK's standard
// configuration chain points at: the region from cfg.Region, AWS_REGION, the
// shared config file or the instance metadata service; credentials from the
// default chain (environment, web identity / IRSA, EKS Pod Identity, shared
// files, instance profile; the metadata service's endpoint from
// AWS_EC2_METADATA_SERVICE_ENDPOINT); the endpoint from AWS_ENDPOINT_URL_EC2 or
// AWS_ENDPOINT_URL (an EC2-compatible cloud, or the emulator), else EC2's
// own. Credentials are fetched at the first call, so a bad setup shows in
// HealthCheck rather than here. Close the Cloud when done.
func New(ctx context.Context, cfg Config) (Cloud, error) {
	awsCfg, err := LoadAWSConfig(ctx, cfg.Region)
	if err != nil {
		return nil, err
	}
	return NewFromAWSConfig(awsCfg, cfg)
}

// LoadAWSConfig is the SDK's standard configuration with the region
// settled as New settles it (region if not empty, else AWS_REGION or the
// shared config file, else the instance metadata service), for the
// controller's other AWS clients (KMS) to use what its EC2 client uses.
func LoadAWSConfig(ctx context.Context, region string) (aws.Config, error) {
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load the AWS SDK configuration: %w", err)
	}
	if awsCfg.Region == "" {
		imdsCtx, cancel := context.WithTimeout(ctx, imdsRegionTimeout)
		defer cancel()
		out, err := imds.NewFromConfig(awsCfg).GetRegion(imdsCtx, &imds.GetRegionInput{})
		if err != nil {
			return aws.Config{}, fmt.Errorf("no AWS region: set AWS_REGION, or run where the instance metadata service answers (%w)", err)
		}
		awsCfg.Region = out.Region
	}
	return awsCfg, nil
}

// imdsRegionTimeout bounds the region lookup in the instance metadata
// service, so a controller that runs off EC2 without AWS_REGION fails fast.
const imdsRegionTimeout = 10 * time.Second

// NewFromAWSConfig is New with an SDK configuration the caller loaded
// itself (a program with its own credential setup, or a test pointing at an
// emulator). It changes neither awsCfg nor anything it shares.
func NewFromAWSConfig(awsCfg aws.Config, cfg Config) (Cloud, error) {
	cfg = cfg.withDefaults()
	recorder, err := apimetrics.NewRecorder(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("register the EC2 API metrics: %w", err)
	}
	throttles := &throttleClock{}
	recorder.OnStrain = func(op, code string) { throttles.strained(op, code, cfg.ThrottledPollGrid) }
	retry := newRetryers(cfg.MaxRetryBackoff)
	client := ec2.NewFromConfig(awsCfg, func(o *ec2.Options) {
		o.Retryer = retry.reads
		o.RetryMaxAttempts = 0
		o.HTTPClient = sdkhttp.Wrap(o.HTTPClient)
		o.APIOptions = append(slices.Clone(o.APIOptions),
			recorder.AddMiddleware,
			awsmiddleware.AddUserAgentKeyValue("diskplane", version.Version()))
		if cfg.UserAgentExtra != "" {
			o.APIOptions = append(o.APIOptions, awsmiddleware.AddUserAgentKey(cfg.UserAgentExtra))
		}
	})
	c := &ec2Cloud{
		cfg:       cfg,
		ec2:       client,
		retry:     retry,
		devices:   devicenames.NewAllocator(cfg.DeviceNameRejectionTTL),
		inUse:     newDevicesInUse(cfg.DeviceNamesTTL),
		latencies: newLatencies(),
		throttles: throttles,
		sends:     newSendLog(cfg.VisibilityTimeout),
		names:     newVolumeNameIndex(cfg.nameIndexMaxAge()),
		tokens:    newTokenHints(),
		zones:     cached[[]Zone]{ttl: cfg.ZoneCacheTTL},
		health:    cached[struct{}]{ttl: cfg.HealthCheckInterval},
	}
	if c.lookups, err = newLookups(c); err != nil {
		return nil, err
	}
	endpoint := "EC2's regional endpoint"
	if e := client.Options().BaseEndpoint; e != nil {
		endpoint = *e
	}
	klog.V(2).InfoS("EC2 cloud provider ready", "region", awsCfg.Region, "endpoint", endpoint,
		"batching", !cfg.DisableBatching, "batchMaxDelay", cfg.BatchMaxDelay)
	return c, nil
}

// Close stops the Describe batchers; calls still waiting in them fail.
func (c *ec2Cloud) Close() {
	c.lookups.close()
}

// bound gives a call whose context has no deadline the default timeout.
func (c *ec2Cloud) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.DefaultTimeout)
}
