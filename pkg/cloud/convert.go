package cloud

import (
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// EC2 volume, attachment and snapshot states the cloud layer acts on.
const (
	volumeCreating  = string(types.VolumeStateCreating)
	volumeAvailable = string(types.VolumeStateAvailable)
	volumeInUse     = string(types.VolumeStateInUse)
	volumeDeleting  = string(types.VolumeStateDeleting)
	volumeDeleted   = string(types.VolumeStateDeleted)
	volumeError     = string(types.VolumeStateError)

	snapshotCompleted = string(types.SnapshotStateCompleted)
	snapshotError     = string(types.SnapshotStateError)
)

// toVolume converts EC2's description of a volume into the driver's terms.
func toVolume(v types.Volume) *Volume {
	vol := &Volume{
		ID:             aws.ToString(v.VolumeId),
		Name:           tagValue(v.Tags, TagVolumeName),
		SizeGiB:        aws.ToInt32(v.Size),
		Type:           VolumeType(v.VolumeType),
		IOPS:           aws.ToInt32(v.Iops),
		Throughput:     aws.ToInt32(v.Throughput),
		Encrypted:      aws.ToBool(v.Encrypted),
		KMSKeyID:       aws.ToString(v.KmsKeyId),
		Zone:           aws.ToString(v.AvailabilityZone),
		ZoneID:         aws.ToString(v.AvailabilityZoneId),
		SnapshotID:     aws.ToString(v.SnapshotId),
		SourceVolumeID: aws.ToString(v.SourceVolumeId),
		MultiAttach:    aws.ToBool(v.MultiAttachEnabled),
		State:          string(v.State),
		Tags:           tagMap(v.Tags),
		CreatedAt:      aws.ToTime(v.CreateTime),
	}
	for _, a := range v.Attachments {
		vol.Attachments = append(vol.Attachments, Attachment{
			InstanceID:          aws.ToString(a.InstanceId),
			DevicePath:          aws.ToString(a.Device),
			State:               string(a.State),
			DeleteOnTermination: aws.ToBool(a.DeleteOnTermination),
		})
	}
	return vol
}

// toSnapshot converts EC2's description of a snapshot into the driver's terms.
func toSnapshot(s types.Snapshot) *Snapshot {
	return &Snapshot{
		ID:             aws.ToString(s.SnapshotId),
		Name:           tagValue(s.Tags, TagSnapshotName),
		SourceVolumeID: aws.ToString(s.VolumeId),
		SizeGiB:        aws.ToInt32(s.VolumeSize),
		State:          string(s.State),
		Ready:          string(s.State) == snapshotCompleted,
		StateMessage:   aws.ToString(s.StateMessage),
		Tags:           tagMap(s.Tags),
		CreatedAt:      aws.ToTime(s.StartTime),
	}
}

// toInstance converts EC2's description of an instance into the driver's terms.
func toInstance(in types.Instance) *Instance {
	inst := &Instance{
		ID:                    aws.ToString(in.InstanceId),
		Type:                  string(in.InstanceType),
		StateTransitionReason: aws.ToString(in.StateTransitionReason),
	}
	if in.State != nil {
		inst.State = string(in.State.Name)
	}
	if in.Placement != nil {
		inst.Zone = aws.ToString(in.Placement.AvailabilityZone)
		inst.ZoneID = aws.ToString(in.Placement.AvailabilityZoneId)
	}
	for _, m := range in.BlockDeviceMappings {
		if name := aws.ToString(m.DeviceName); name != "" {
			inst.DeviceNames = append(inst.DeviceNames, name)
		}
		if m.Ebs != nil {
			inst.AttachedVolumes++
		}
	}
	return inst
}

// tagMap turns EC2 tags into a map; nil when there are none.
func tagMap(tags []types.Tag) map[string]string {
	if len(tags) == 0 {
		return nil
	}
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

// ec2Tags turns a map into EC2 tags, in a stable order so a retried request
// is byte-for-byte the same (EC2 compares idempotent requests).
func ec2Tags(m map[string]string) []types.Tag {
	tags := make([]types.Tag, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		tags = append(tags, types.Tag{Key: aws.String(k), Value: aws.String(m[k])})
	}
	return tags
}

// isGone reports whether a volume state means the volume is lost for good.
func isGone(state string) bool {
	return state == volumeError || state == volumeDeleting || state == volumeDeleted
}
