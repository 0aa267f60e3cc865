package cloud

import (
	"context"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/pkg/testutil/motoserver"
)

// testEC2 is an EC2 the cloud layer's integration tests run against:
// ec2-emulator (emulatortest.Env), or moto (motoserver.Account) when make
// test-moto sets DISKPLANE_TEST_EC2=moto. Either counts the requests it was
// sent, by action and outcome.
type testEC2 interface {
	AWSConfig(accessKeyID, secretAccessKey string) aws.Config
	EC2Client(optFns ...func(*ec2.Options)) *ec2.Client
	Region() string
	Calls(action string) int
	CallsWithCode(action, code string) int
}

// backend is the EC2 of a backend-neutral test with the instances it asked
// for.
type backend struct {
	testEC2
	// instances are the IDs and zones of Options.Instances, in order (one
	// m5.large in us-east-1a when it declares none); the first is the one a
	// test attaches to by default.
	instances []model.Instance
}

// Zone is the first instance's zone.
func (b *backend) Zone() string { return b.instances[0].Zone }

// instance is the ID of the i-th declared instance.
func (b *backend) instance(i int) string { return b.instances[i].ID }

// start runs a backend as opts describes and a Cloud on it with the test
// configuration. Against moto, opts may only declare instances (zone and
// type) and KMS keys (by alias); a test that needs more of the emulator
// calls startEmulator.
func start(t testing.TB, opts emulatortest.Options) (*ec2Cloud, *backend) {
	t.Helper()
	b := startBackend(t, opts)
	return newCloud(t, b, testConfig()), b
}

// startBackend runs the EC2 of a backend-neutral test.
func startBackend(t testing.TB, opts emulatortest.Options) *backend {
	t.Helper()
	if !motoserver.Selected() {
		env := emulatortest.Start(t, opts)
		b := &backend{testEC2: env}
		if len(opts.Instances) == 0 {
			b.instances = []model.Instance{env.LocalInstance()}
		}
		for _, spec := range opts.Instances {
			if spec.ID == "" || spec.Zone == "" {
				t.Fatalf("instance %+v: a backend-neutral test names each instance's ID and zone (moto ignores the ID)", spec)
			}
			b.instances = append(b.instances, model.Instance{ID: spec.ID, Zone: spec.Zone})
		}
		return b
	}
	servable := emulatortest.Options{Instances: opts.Instances, KMS: opts.KMS}
	if !reflect.DeepEqual(opts, servable) {
		t.Fatalf("moto cannot serve options %+v: the test must call startEmulator and name the moto limitation", opts)
	}
	account := motoserver.Shared(t).NewAccount(t)
	ctx := context.Background()
	specs := opts.Instances
	if len(specs) == 0 {
		specs = []model.InstanceSpec{{}}
	}
	b := &backend{testEC2: account}
	for _, spec := range specs {
		if spec.NetworkInterfaces > 1 || len(spec.Tags) > 0 {
			t.Fatalf("instance %+v: the moto harness starts plain instances only", spec)
		}
		zone, typ := spec.Zone, spec.Type
		if zone == "" {
			zone = "us-east-1a"
		}
		if typ == "" {
			typ = model.DefaultInstanceType
		}
		id, err := account.RunInstance(ctx, zone, typ)
		if err != nil {
			t.Fatal(err)
		}
		b.instances = append(b.instances, model.Instance{ID: id, Zone: zone})
	}
	for _, key := range opts.KMS.Keys {
		for _, alias := range key.Aliases {
			if _, err := account.CreateKey(ctx, alias); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b
}

// startEmulator runs ec2-emulator and a Cloud on it for a test that needs
// what only the emulator offers; against moto the test is skipped, naming
// the moto limitation (motoLacks) that rules it out.
func startEmulator(t testing.TB, opts emulatortest.Options, motoLacks string) (*ec2Cloud, *emulatortest.Env) {
	t.Helper()
	emulatorOnly(t, motoLacks)
	env := emulatortest.Start(t, opts)
	return newCloud(t, env, testConfig()), env
}

// motoLacksFaults is why a test that injects EC2's failures runs against
// ec2-emulator only.
const motoLacksFaults = "has no fault injection (ec2-emulator's faults: clock skew, commit-then-fail, throttling, injected errors, unusable keys)"

// motoIgnoresClientToken is why a test of CreateVolume's ClientToken runs
// against ec2-emulator only.
const motoIgnoresClientToken = "ignores CreateVolume's ClientToken: a retry with a spent token makes another volume instead of answering with the first or IdempotentParameterMismatch"

// motoLacksCopyVolumes is why a clone runs against ec2-emulator only.
const motoLacksCopyVolumes = "does not implement CopyVolumes (volume clones)"

// emulatorOnly skips a test under make test-moto with the moto limitation
// that rules it out; the skip is reported, never silent.
func emulatorOnly(t testing.TB, motoLacks string) {
	t.Helper()
	if motoserver.Selected() {
		t.Skipf("ec2-emulator only: moto 5.2.1 %s", motoLacks)
	}
}

// describedZones is the backend's zones as DescribeAvailabilityZones lists
// them (one call, counted).
func describedZones(t testing.TB, b testEC2) []Zone {
	t.Helper()
	out, err := b.EC2Client().DescribeAvailabilityZones(context.Background(), &ec2.DescribeAvailabilityZonesInput{})
	if err != nil {
		t.Fatalf("DescribeAvailabilityZones: %v", err)
	}
	var zones []Zone
	for _, z := range out.AvailabilityZones {
		zones = append(zones, Zone{Name: aws.ToString(z.ZoneName), ID: aws.ToString(z.ZoneId)})
	}
	return zones
}

// setenvBackend points the SDK's standard variables (endpoint, region,
// static keys) at an EC2 of the test's own and returns it: an emulator, or
// moto's default account (which only such tests use).
func setenvBackend(t *testing.T) testEC2 {
	t.Helper()
	if !motoserver.Selected() {
		env := emulatortest.Start(t, emulatortest.Options{})
		env.Setenv(t)
		return env
	}
	srv := motoserver.Shared(t)
	for k, v := range srv.Environ() {
		t.Setenv(k, v)
	}
	return srv.DefaultAccount()
}

// namedVolumes returns the IDs of the backend's volumes that carry a CSI
// volume name, by name: from the emulator's model (the truth, which
// injected eventual consistency does not hide), from moto through the API.
func namedVolumes(t testing.TB, b testEC2) map[string][]string {
	t.Helper()
	named := map[string][]string{}
	if wrapped, ok := b.(*backend); ok {
		b = wrapped.testEC2
	}
	if env, ok := b.(*emulatortest.Env); ok {
		for _, v := range env.Cloud().Volumes() {
			if name := v.Tags[TagVolumeName]; name != "" {
				named[name] = append(named[name], v.ID)
			}
		}
		return named
	}
	pages := ec2.NewDescribeVolumesPaginator(b.EC2Client(), &ec2.DescribeVolumesInput{
		Filters: []types.Filter{{Name: aws.String("tag-key"), Values: []string{TagVolumeName}}},
	})
	var volumes []types.Volume
	for pages.HasMorePages() {
		page, err := pages.NextPage(context.Background())
		if err != nil {
			t.Fatalf("DescribeVolumes: %v", err)
		}
		volumes = append(volumes, page.Volumes...)
	}
	for _, v := range volumes {
		for _, tag := range v.Tags {
			if aws.ToString(tag.Key) == TagVolumeName {
				named[aws.ToString(tag.Value)] = append(named[aws.ToString(tag.Value)], aws.ToString(v.VolumeId))
			}
		}
	}
	return named
}
