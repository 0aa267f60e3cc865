package ec2api_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

// fixture is an emulator, a client without retries (so every call is one
// request and every error shows) and the test's context.
type fixture struct {
	env    *emulatortest.Env
	client *ec2.Client
	ctx    context.Context
	local  string
	zone   string
}

func newFixture(t *testing.T, opts emulatortest.Options) *fixture {
	t.Helper()
	env := emulatortest.Start(t, opts)
	return &fixture{
		env:    env,
		client: env.EC2Client(func(o *ec2.Options) { o.Retryer = aws.NopRetryer{} }),
		ctx:    t.Context(),
		local:  env.LocalInstance().ID,
		zone:   env.Zone(),
	}
}

// apiCode is the EC2 error code of err ("" for nil).
func apiCode(err error) string {
	if err == nil {
		return ""
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return "not an API error: " + err.Error()
}

// volume creates a gp3 volume of size GiB in the local zone.
func (f *fixture) volume(t *testing.T, size int32, tags ...types.Tag) string {
	t.Helper()
	in := &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(size), VolumeType: types.VolumeTypeGp3}
	if len(tags) > 0 {
		in.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: tags}}
	}
	out, err := f.client.CreateVolume(f.ctx, in)
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	return aws.ToString(out.VolumeId)
}

// get describes one volume.
func (f *fixture) get(t *testing.T, id string) types.Volume {
	t.Helper()
	out, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
	if err != nil {
		t.Fatalf("DescribeVolumes(%s): %v", id, err)
	}
	if len(out.Volumes) != 1 {
		t.Fatalf("DescribeVolumes(%s) returned %d volumes", id, len(out.Volumes))
	}
	return out.Volumes[0]
}

// attach attaches a volume and waits until it is attached, polling like a
// client does.
func (f *fixture) attach(t *testing.T, volumeID, instanceID, device string) {
	t.Helper()
	if _, err := f.client.AttachVolume(f.ctx, &ec2.AttachVolumeInput{VolumeId: aws.String(volumeID), InstanceId: aws.String(instanceID), Device: aws.String(device)}); err != nil {
		t.Fatalf("AttachVolume(%s, %s, %s): %v", volumeID, instanceID, device, err)
	}
	f.waitAttachment(t, volumeID, instanceID, types.VolumeAttachmentStateAttached)
}

// waitAttachment polls DescribeVolumes until the volume's attachment to the
// instance is in state (or, for "detached", gone).
func (f *fixture) waitAttachment(t *testing.T, volumeID, instanceID string, state types.VolumeAttachmentState) {
	t.Helper()
	for i := 0; ; i++ {
		v := f.get(t, volumeID)
		var got types.VolumeAttachmentState = types.VolumeAttachmentStateDetached
		for _, a := range v.Attachments {
			if aws.ToString(a.InstanceId) == instanceID {
				got = a.State
			}
		}
		if got == state {
			return
		}
		if i == 1000 {
			t.Fatalf("volume %s: attachment to %s is %s, waited for %s", volumeID, instanceID, got, state)
		}
	}
}

func tag(k, v string) types.Tag { return types.Tag{Key: aws.String(k), Value: aws.String(v)} }
