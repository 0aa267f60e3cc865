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

	"github.com/diskplane/diskplane/pkg/cloud/devicenames"
)

// maxDeviceNameAttempts bounds how many device names one AttachVolume tries
// when EC2 refuses names as already in use.
const maxDeviceNameAttempts = 3

// attachSendKey is the sendLog key of the attaches of a multi-attach volume.
func attachSendKey(volumeID string) string { return "attach/" + volumeID }

// AttachVolume attaches a volume to an instance and waits until it is
// attached; it returns the device name. An attachment already under way to
// that instance is awaited rather than issued again. It decides from
// opts.Read when the caller read the volume for this request, and reads it
// otherwise.
func (c *ec2Cloud) AttachVolume(ctx context.Context, volumeID, instanceID string, opts AttachOptions) (string, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	vol := opts.Read
	if vol == nil || vol.ID != volumeID {
		if err := c.awaitLookupTick(ctx); err != nil {
			return "", err
		}
		raw, err := c.describeVolume(ctx, volumeID)
		if err != nil {
			return "", err
		}
		vol = toVolume(raw)
	}
	if vol.MultiAttach && !opts.Shared {
		// EC2 would attach it beside another attachment; an attachment this
		// process made a moment ago may not show in the read above.
		if err := c.awaitAttachmentsSettled(ctx, volumeID, instanceID); err != nil {
			return "", err
		}
	}
	if a, ok := vol.attachmentTo(instanceID); ok {
		switch a.State {
		case AttachmentAttached:
			return a.DevicePath, nil
		case AttachmentAttaching:
			// Begun by an earlier attempt: its stuck window runs from now.
			klog.V(4).InfoS("Attachment already under way; waiting for it", "volumeID", volumeID, "instanceID", instanceID)
			return c.waitAttached(ctx, volumeID, instanceID, a.DevicePath, time.Time{}, time.Now(), opts.Shared)
		case AttachmentDetaching:
			// An earlier detach is still running; attach again once it is done.
			if err := c.waitDetached(ctx, volumeID, instanceID, time.Time{}); err != nil {
				return "", err
			}
		}
	}
	if err := attachedElsewhere(vol, instanceID, opts.Shared); err != nil {
		return "", err
	}
	for attempt := 1; ; attempt++ {
		inUse, fresh, err := c.deviceNamesInUse(ctx, instanceID)
		if err != nil {
			return "", err
		}
		lease, err := c.devices.Acquire(instanceID, volumeID, inUse)
		if err != nil {
			if !fresh && attempt < maxDeviceNameAttempts {
				// The instance's view may hold names freed since: read it again.
				c.inUse.forget(instanceID)
				continue
			}
			return "", fmt.Errorf("attach volume %s to instance %s: %w: %w", volumeID, instanceID, ErrLimitExceeded, err)
		}
		device, err := c.attachAs(ctx, volumeID, instanceID, lease, opts.Shared)
		lease.Release()
		if errors.Is(err, ErrNotFound) {
			// The instance may be gone: the next attach reads it again.
			c.inUse.forget(instanceID)
		}
		if !isDeviceInUse(err, lease.Name) || attempt == maxDeviceNameAttempts {
			return device, err
		}
		klog.V(2).InfoS("EC2 refused the device name as in use; trying another", "volumeID", volumeID,
			"instanceID", instanceID, "device", lease.Name)
		c.devices.Reject(instanceID, lease.Name)
		c.inUse.forget(instanceID)
	}
}

// deviceNamesInUse returns the device names in use on an instance: from
// its DescribeInstances of the last DeviceNamesTTL (fresh false; see
// devicesInUse), else from a new one, which also tells that the instance
// exists.
func (c *ec2Cloud) deviceNamesInUse(ctx context.Context, instanceID string) ([]string, bool, error) {
	return c.inUse.names(ctx, instanceID, func(ctx context.Context) ([]string, error) {
		inst, err := c.describeInstance(ctx, instanceID)
		if err != nil {
			return nil, err
		}
		return toInstance(inst).DeviceNames, nil
	})
}

// attachAs sends AttachVolume under the leased device name and waits until
// the volume is attached. The lease is held by the caller until this returns,
// because only then does DescribeInstances list the name as taken.
func (c *ec2Cloud) attachAs(ctx context.Context, volumeID, instanceID string, lease *devicenames.Lease, shared bool) (string, error) {
	klog.V(2).InfoS("Attaching volume", "volumeID", volumeID, "instanceID", instanceID, "device", lease.Name)
	called := time.Now()
	out, err := c.ec2.AttachVolume(ctx, &ec2.AttachVolumeInput{
		VolumeId: aws.String(volumeID), InstanceId: aws.String(instanceID), Device: aws.String(lease.Name),
	}, c.retry.use(opAttachVolume))
	c.sends.record(attachSendKey(volumeID), err)
	if err != nil {
		if errorCode(err) != codeVolumeInUse {
			return "", classify(opAttachVolume, err)
		}
		// Attached meanwhile: by an earlier attempt of ours whose answer was
		// lost (then wait for it), or to another instance.
		raw, derr := c.describeVolume(ctx, volumeID)
		if derr != nil {
			return "", derr
		}
		a, ok := rawAttachmentTo(raw, instanceID)
		if !ok {
			if elsewhere := attachedElsewhere(toVolume(raw), instanceID, shared); elsewhere != nil {
				return "", elsewhere
			}
			return "", classify(opAttachVolume, err)
		}
		return c.waitAttached(ctx, volumeID, instanceID, aws.ToString(a.Device), time.Time{}, time.Now(), shared)
	}
	device := lease.Name
	if d := aws.ToString(out.Device); d != "" {
		device = d
	}
	if out.State == types.VolumeAttachmentStateAttached {
		c.doneInAnswer(transitionAttach, "volumeID", volumeID, "instanceID", instanceID, "device", device)
		return device, nil
	}
	sent := sentAt(out.ResultMetadata, called)
	device, err = c.waitAttached(ctx, volumeID, instanceID, device, sent, sent, shared)
	if errors.Is(err, errAttachStuck) {
		// The guest may still hold the name; let later attaches try others.
		c.devices.Reject(instanceID, lease.Name)
	}
	return device, err
}

// errAttachStuck marks an attachment that stayed "attaching" too long.
var errAttachStuck = errors.New("attachment stuck")

// waitAttached waits until the volume's attachment to the instance is
// "attached", from sent when this process sent the AttachVolume that began
// it (the attempt EC2 took: see sentAt; zero when it found the attachment
// under way; see waitTransition). An attachment still "attaching"
// AttachStuckTimeout after started (when this process sent AttachVolume, or
// first saw the attachment under way, by its own clock: EC2's attach time
// may be off by minutes) is detached, and the call fails, so that the next
// attempt starts clean rather than waiting on an attachment that will not
// complete (the classic cause is a device name the guest still holds).
func (c *ec2Cloud) waitAttached(ctx context.Context, volumeID, instanceID, device string, sent, started time.Time, shared bool) (string, error) {
	err := c.waitVolume(ctx, transitionAttach, sent, volumeID, func(raw types.Volume, err error) (bool, string, error) {
		if err != nil {
			return false, "", err
		}
		a, ok := rawAttachmentTo(raw, instanceID)
		if ok {
			device = aws.ToString(a.Device)
		}
		state := string(a.State)
		switch {
		case ok && state == AttachmentAttached:
			return true, "", nil
		case ok && state != AttachmentAttaching:
			return false, "", fmt.Errorf("volume %s was %s from instance %s while attaching: %w", volumeID, state, instanceID, ErrConflict)
		case time.Since(started) < c.cfg.AttachStuckTimeout:
			if !ok {
				// EC2's eventual consistency: the new attachment may not
				// show in DescribeVolumes for a moment.
				return false, fmt.Sprintf("attachment of volume %s to instance %s is not visible yet", volumeID, instanceID), nil
			}
			return false, fmt.Sprintf("volume %s is attaching to instance %s as %s", volumeID, instanceID, device), nil
		case !ok:
			if elsewhere := attachedElsewhere(toVolume(raw), instanceID, shared); elsewhere != nil {
				return false, "", elsewhere
			}
			return false, "", fmt.Errorf("attachment of volume %s to instance %s vanished: %w", volumeID, instanceID, ErrConflict)
		default:
			return false, "", c.detachStuck(ctx, volumeID, instanceID, device, started)
		}
	})
	if err != nil {
		return "", err
	}
	klog.V(2).InfoS("Volume attached", "volumeID", volumeID, "instanceID", instanceID, "device", device)
	return device, nil
}

// detachStuck detaches an attachment that never completed and returns the
// error that reports it.
func (c *ec2Cloud) detachStuck(ctx context.Context, volumeID, instanceID, device string, started time.Time) error {
	stuck := fmt.Errorf("volume %s stayed attaching to instance %s as %s for %s; detached it so the next attempt starts clean: %w: %w",
		volumeID, instanceID, device, time.Since(started).Round(time.Second), ErrUnavailable, errAttachStuck)
	klog.InfoS("Attachment stuck; detaching it", "volumeID", volumeID, "instanceID", instanceID, "device", device, "since", started)
	_, err := c.ec2.DetachVolume(ctx, &ec2.DetachVolumeInput{
		VolumeId: aws.String(volumeID), InstanceId: aws.String(instanceID),
	}, c.retry.use(opDetachVolume))
	if err != nil {
		return fmt.Errorf("%w; the detach failed too: %w", stuck, classify(opDetachVolume, err))
	}
	return stuck
}

// DetachVolume detaches a volume from an instance and waits until it is
// detached. A volume not attached to that instance is ErrNotFound, as is a
// volume or instance that no longer exists.
func (c *ec2Cloud) DetachVolume(ctx context.Context, volumeID, instanceID string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	klog.V(2).InfoS("Detaching volume", "volumeID", volumeID, "instanceID", instanceID)
	called := time.Now()
	out, err := c.ec2.DetachVolume(ctx, &ec2.DetachVolumeInput{
		VolumeId: aws.String(volumeID), InstanceId: aws.String(instanceID),
	}, c.retry.use(opDetachVolume))
	var sent time.Time // zero: an earlier detach is running, not timed here
	switch {
	case err == nil && out.State == types.VolumeAttachmentStateDetached:
		c.doneInAnswer(transitionDetach, "volumeID", volumeID, "instanceID", instanceID)
		return nil
	case err == nil:
		sent = sentAt(out.ResultMetadata, called)
	default:
		switch errorCode(err) {
		case codeIncorrectState, "InvalidAttachment.NotFound":
			// Not attached to the instance, or a detach already running:
			// only DescribeVolumes tells which.
			raw, derr := c.describeVolume(ctx, volumeID)
			if derr != nil {
				return derr
			}
			if a, ok := rawAttachmentTo(raw, instanceID); !ok || string(a.State) == AttachmentDetached {
				return fmt.Errorf("volume %s is not attached to instance %s: %w: %w", volumeID, instanceID, ErrNotFound, classify(opDetachVolume, err))
			}
		default:
			return classify(opDetachVolume, err)
		}
	}
	if err := c.waitDetached(ctx, volumeID, instanceID, sent); err != nil {
		return err
	}
	klog.V(2).InfoS("Volume detached", "volumeID", volumeID, "instanceID", instanceID)
	return nil
}

// waitDetached waits until the volume has no attachment to the instance,
// from sent when this process sent the DetachVolume (the attempt EC2 took:
// see sentAt; zero when it found the detach under way; see waitTransition).
// A volume that is gone is detached too.
func (c *ec2Cloud) waitDetached(ctx context.Context, volumeID, instanceID string, sent time.Time) error {
	return c.waitVolume(ctx, transitionDetach, sent, volumeID, func(raw types.Volume, err error) (bool, string, error) {
		if errors.Is(err, ErrNotFound) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		a, ok := rawAttachmentTo(raw, instanceID)
		if !ok || string(a.State) == AttachmentDetached {
			return true, "", nil
		}
		return false, fmt.Sprintf("volume %s is %s from instance %s", volumeID, a.State, instanceID), nil
	})
}

// rawAttachmentTo returns EC2's record of a volume's attachment to an
// instance, with its attach time.
func rawAttachmentTo(v types.Volume, instanceID string) (types.VolumeAttachment, bool) {
	for _, a := range v.Attachments {
		if aws.ToString(a.InstanceId) == instanceID {
			return a, true
		}
	}
	return types.VolumeAttachment{}, false
}

// attachmentTo returns the volume's attachment to an instance.
func (v *Volume) attachmentTo(instanceID string) (Attachment, bool) {
	for _, a := range v.Attachments {
		if a.InstanceID == instanceID {
			return a, true
		}
	}
	return Attachment{}, false
}

// awaitAttachmentsSettled reads a multi-attach volume's attachments until
// one to another instance shows (AttachedElsewhereError) or the reads can
// be trusted to show what was attached lately (see sendLog): by this
// process, or by a previous one (a controller killed or replaced as leader
// just after it attached the volume elsewhere), whose attachment a read
// may not show until the window after this process's start. EC2 would
// attach the volume beside it.
func (c *ec2Cloud) awaitAttachmentsSettled(ctx context.Context, volumeID, instanceID string) error {
	var elsewhere error
	_, err := c.awaitSettled(ctx, attachSendKey(volumeID), true, "an attachment of volume "+volumeID,
		func(ctx context.Context) (bool, error) {
			raw, err := c.describeVolume(ctx, volumeID)
			if err != nil {
				return false, err
			}
			elsewhere = attachedElsewhere(toVolume(raw), instanceID, false)
			return elsewhere != nil, nil
		})
	if err != nil {
		return err
	}
	return elsewhere
}

// attachedElsewhere returns an *AttachedElsewhereError when a volume is
// attached (or attaching, or still detaching) to another instance, unless
// it is multi-attach and shared is set (multi-node access).
func attachedElsewhere(v *Volume, instanceID string, shared bool) error {
	if v.MultiAttach && shared {
		return nil
	}
	var others []string
	for _, a := range v.Attachments {
		if a.InstanceID != instanceID && a.State != AttachmentDetached {
			others = append(others, a.InstanceID)
		}
	}
	if len(others) == 0 {
		return nil
	}
	return &AttachedElsewhereError{VolumeID: v.ID, InstanceIDs: others}
}
