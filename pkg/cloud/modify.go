package cloud

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"
)

// EC2 volume modification states.
const (
	modificationModifying  = string(types.VolumeModificationStateModifying)
	modificationOptimizing = string(types.VolumeModificationStateOptimizing)
	modificationCompleted  = string(types.VolumeModificationStateCompleted)
	modificationFailed     = string(types.VolumeModificationStateFailed)
)

// modifySendKey is the sendLog key of the ModifyVolume requests of a volume.
func modifySendKey(volumeID string) string { return "modify/" + volumeID }

// ModifyVolume changes a volume's size, type, IOPS or throughput and waits
// until EC2 says "optimizing" (the volume already has its new settings) or
// "completed". A size is a minimum (volumes only grow). Asking for what the
// volume already is, or is already becoming, sends nothing: EC2 would count
// it against the volume's few modifications a day. A modification in
// progress towards other settings is ErrConflict, since EC2 takes one at a
// time. ModifyVolume has no
// ClientToken, so it is never repeated blindly: after a failure that may
// have been applied, and while this process's last request for the volume
// may not show in EC2's reads yet, the volume's latest modification is read
// until it shows the request or the reads can be trusted (see sendLog).
func (c *ec2Cloud) ModifyVolume(ctx context.Context, volumeID string, mod VolumeModification) (*Volume, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	for {
		vol, err := c.modifyOnce(ctx, volumeID, mod)
		if !errors.Is(err, errMaybeApplied) {
			return vol, err
		}
		klog.InfoS("ModifyVolume failed and may have been applied; reading the volume's modification before asking again",
			"volumeID", volumeID, "err", err)
	}
}

// errMaybeApplied marks a request that failed in a way that may have been
// applied (see refused).
var errMaybeApplied = errors.New("the request may have been applied")

// modifyOnce is one pass of ModifyVolume: it waits for a modification it
// finds towards the request's settings, and otherwise sends one.
func (c *ec2Cloud) modifyOnce(ctx context.Context, volumeID string, mod VolumeModification) (*Volume, error) {
	key := modifySendKey(volumeID)
	if c.sends.unsettled(key, false) > 0 {
		// This process asked for a modification of the volume a moment ago:
		// until EC2's reads show it, reading nothing proves nothing.
		if _, err := c.awaitSettled(ctx, key, false, "a modification of volume "+volumeID, func(ctx context.Context) (bool, error) {
			m, err := c.describeModification(ctx, volumeID)
			if errors.Is(err, ErrNotFound) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			return coversRequest(m, mod), nil
		}); err != nil {
			return nil, err
		}
	}
	raw, err := c.describeVolume(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	vol := toVolume(raw)
	latest, err := c.describeModification(ctx, volumeID)
	hasLatest := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	state := string(latest.ModificationState)
	if hasLatest && state != modificationFailed {
		// The latest modification's targets are what the volume is, or is
		// becoming; DescribeVolumes may not show them yet.
		applyTargets(vol, latest)
	}
	if mod.SizeGiB != 0 && mod.SizeGiB < vol.SizeGiB {
		// A size is a minimum: the volume is, or is becoming, larger.
		mod.SizeGiB = 0
	}
	if !changes(vol, mod) {
		if hasLatest && state == modificationModifying {
			klog.V(4).InfoS("Modification to these settings in progress; waiting for it", "volumeID", volumeID)
			return vol, c.waitModified(ctx, volumeID, aws.ToTime(latest.StartTime), time.Time{})
		}
		return vol, nil
	}
	if hasLatest && (state == modificationModifying || state == modificationOptimizing) {
		return nil, fmt.Errorf("volume %s is still %s towards %s; EC2 takes one modification at a time: %w",
			volumeID, state, describeTargets(vol), ErrConflict)
	}
	in := &ec2.ModifyVolumeInput{VolumeId: aws.String(volumeID)}
	if mod.SizeGiB != 0 && mod.SizeGiB != vol.SizeGiB {
		in.Size = aws.Int32(mod.SizeGiB)
	}
	if mod.Type != "" && mod.Type != vol.Type {
		in.VolumeType = types.VolumeType(mod.Type)
	}
	if mod.IOPS != 0 && mod.IOPS != vol.IOPS {
		in.Iops = aws.Int32(mod.IOPS)
	}
	if mod.Throughput != 0 && mod.Throughput != vol.Throughput {
		in.Throughput = aws.Int32(mod.Throughput)
	}
	klog.V(2).InfoS("Modifying volume", "volumeID", volumeID, "sizeGiB", mod.SizeGiB, "type", mod.Type,
		"iops", mod.IOPS, "throughput", mod.Throughput)
	called := time.Now()
	out, err := c.ec2.ModifyVolume(ctx, in, c.retry.use(opModifyVolume))
	c.sends.record(key, err)
	if err != nil {
		if refused(err) || ctx.Err() != nil {
			return nil, classify(opModifyVolume, err)
		}
		return nil, fmt.Errorf("%w: %w", errMaybeApplied, classify(opModifyVolume, err))
	}
	var started time.Time
	if out.VolumeModification != nil {
		applyTargets(vol, *out.VolumeModification)
		started = aws.ToTime(out.VolumeModification.StartTime)
	}
	if err := c.waitModified(ctx, volumeID, started, sentAt(out.ResultMetadata, called)); err != nil {
		return nil, err
	}
	klog.V(2).InfoS("Volume modified", "volumeID", volumeID, "sizeGiB", vol.SizeGiB, "type", vol.Type, "iops", vol.IOPS, "throughput", vol.Throughput)
	return vol, nil
}

// changes reports whether the modification asks for anything the volume
// does not have.
func changes(v *Volume, mod VolumeModification) bool {
	return (mod.SizeGiB != 0 && mod.SizeGiB != v.SizeGiB) ||
		(mod.Type != "" && mod.Type != v.Type) ||
		(mod.IOPS != 0 && mod.IOPS != v.IOPS) ||
		(mod.Throughput != 0 && mod.Throughput != v.Throughput)
}

// coversRequest reports whether a modification that is under way or done
// gives the volume everything the request asks for.
func coversRequest(m types.VolumeModification, mod VolumeModification) bool {
	if string(m.ModificationState) == modificationFailed {
		return false
	}
	v := &Volume{}
	applyTargets(v, m)
	return (mod.SizeGiB == 0 || v.SizeGiB >= mod.SizeGiB) &&
		(mod.Type == "" || v.Type == mod.Type) &&
		(mod.IOPS == 0 || v.IOPS == mod.IOPS) &&
		(mod.Throughput == 0 || v.Throughput == mod.Throughput)
}

// applyTargets overlays a modification's target settings on a volume.
func applyTargets(v *Volume, m types.VolumeModification) {
	if s := aws.ToInt32(m.TargetSize); s != 0 {
		v.SizeGiB = s
	}
	if m.TargetVolumeType != "" {
		v.Type = VolumeType(m.TargetVolumeType)
	}
	if m.TargetIops != nil {
		v.IOPS = *m.TargetIops
	}
	if m.TargetThroughput != nil {
		v.Throughput = *m.TargetThroughput
	}
}

func describeTargets(v *Volume) string {
	return fmt.Sprintf("%d GiB %s, %d IOPS, %d MiB/s", v.SizeGiB, v.Type, v.IOPS, v.Throughput)
}

// waitModified waits until the volume's modification that started at started
// (EC2's clock; zero when unknown) or later is optimizing or completed, from
// sent when this process sent the ModifyVolume (the attempt EC2 took: see
// sentAt; zero when it found the modification under way; see
// waitTransition). Older modifications are ignored: right after
// ModifyVolume, EC2 may still show the previous one.
func (c *ec2Cloud) waitModified(ctx context.Context, volumeID string, started, sent time.Time) error {
	return c.waitTransition(ctx, transitionModify, sent, func(ctx context.Context) (bool, string, error) {
		m, err := c.describeModification(ctx, volumeID)
		if errors.Is(err, ErrNotFound) {
			return false, fmt.Sprintf("modification of volume %s is not visible yet", volumeID), nil
		}
		if err != nil {
			return false, "", err
		}
		if aws.ToTime(m.StartTime).Before(started) {
			return false, fmt.Sprintf("modification of volume %s is not visible yet", volumeID), nil
		}
		switch state := string(m.ModificationState); state {
		case modificationOptimizing, modificationCompleted:
			return true, "", nil
		case modificationFailed:
			return false, "", fmt.Errorf("modification of volume %s failed: %s: %w", volumeID, aws.ToString(m.StatusMessage), ErrInvalidArgument)
		default:
			return false, fmt.Sprintf("volume %s is %s (%d%%)", volumeID, state, aws.ToInt64(m.Progress)), nil
		}
	})
}
