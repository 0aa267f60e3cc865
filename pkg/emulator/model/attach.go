package model

import (
	"regexp"
	"time"

	"k8s.io/klog/v2"
)

// deviceNamePattern is the device names EC2 accepts for an EBS attachment on
// a Linux (HVM) instance: /dev/sd[a-z] with an optional partition number
// 1-15, /dev/xvd[a-z] and /dev/xvd[a-z][a-z], /dev/hd[a-z] with an optional
// partition; and the Windows form xvd[a-z] / xvd[a-z][a-z] without /dev/.
var deviceNamePattern = regexp.MustCompile(`^(/dev/(sd[a-z]([1-9]|1[0-5])?|hd[a-z]([1-9]|1[0-5])?|xvd[a-z][a-z]?)|xvd[a-z][a-z]?)$`)

// AttachVolumeInput is an AttachVolume request.
type AttachVolumeInput struct {
	VolumeID   string
	InstanceID string
	Device     string
	DryRun     bool
}

// AttachVolume attaches a volume to an instance under a device name. The
// attachment is "attaching" until the Attach latency has passed (and, for
// the local instance, the disk store has made the device), then "attached".
func (c *Cloud) AttachVolume(in AttachVolumeInput) (Attachment, error) {
	var out Attachment
	err := c.do(func(now time.Time) error {
		v, inst, e := c.attachTargets(in.VolumeID, in.InstanceID, now)
		if e != nil {
			return e
		}
		if in.Device == "" {
			return Errorf(CodeMissingParameter, "The request must contain the parameter device")
		}
		if !deviceNamePattern.MatchString(in.Device) {
			return Errorf(CodeInvalidParameterValue, "Value (%s) for parameter device is invalid. %s is not a valid EBS device name.", in.Device, in.Device)
		}
		if v.Zone != inst.Zone {
			return Errorf(CodeInvalidVolumeZoneMismatch, "The volume '%s' is not in the same availability zone as instance '%s'", v.ID, inst.ID)
		}
		if e := c.checkAttachable(v, inst, in.Device); e != nil {
			return e
		}
		if in.DryRun {
			return dryRunError()
		}
		a := &Attachment{
			VolumeID:   v.ID,
			InstanceID: inst.ID,
			Device:     in.Device,
			State:      AttachmentAttaching,
			AttachTime: now.UTC(),
			Due:        c.latency.due(transitionAttach, v.ID, now),
		}
		if c.cfg.StickAttach != nil && c.cfg.StickAttach(v.ID) {
			a.Stuck = true
			klog.InfoS("Fault: attachment will stay attaching", "volumeID", v.ID, "instanceID", inst.ID)
		}
		v.Attachments = append(v.Attachments, a)
		v.State = VolumeInUse
		c.auditAttachmentsLocked(v)
		c.markDirty()
		out = *a
		klog.V(2).InfoS("Volume attaching", "volumeID", v.ID, "instanceID", inst.ID, "device", in.Device)
		return nil
	})
	return out, err
}

// attachTargets resolves the volume and instance of an attach request.
func (c *Cloud) attachTargets(volumeID, instanceID string, now time.Time) (*Volume, *Instance, *Error) {
	v, e := c.volumeByID(volumeID, 0, now)
	if e != nil {
		return nil, nil, e
	}
	inst, e := c.instanceByID(instanceID)
	if e != nil {
		return nil, nil, e
	}
	return v, inst, nil
}

// checkAttachable applies EC2's rules for a new attachment of v to inst
// under device: the instance's state (running or stopped), the volume's
// state, multi-attach, device use and the instance's attachment limit.
func (c *Cloud) checkAttachable(v *Volume, inst *Instance, device string) *Error {
	if s := inst.StateValue(); s != InstanceRunning && s != InstanceStopped {
		return Errorf(CodeIncorrectInstanceState, "Instance '%s' is not 'running'.", inst.ID)
	}
	switch v.State {
	case VolumeAvailable:
	case VolumeInUse:
		if !v.MultiAttach || v.attachmentTo(inst.ID) != nil {
			return Errorf(CodeVolumeInUse, "%s is already attached to an instance", v.ID)
		}
		if len(v.Attachments) >= multiAttachMaxTargets {
			return Errorf(CodeAttachmentLimitExceeded, "Volume %s is already attached to the maximum of %d instances.", v.ID, multiAttachMaxTargets)
		}
	default:
		return Errorf(CodeIncorrectState, "%s is not 'available'.", v.ID)
	}
	typ, _ := LookupInstanceType(inst.Type)
	if v.MultiAttach && !typ.Nitro() {
		return Errorf(CodeInvalidParameterCombination, "Multi-Attach volumes can be attached only to instances built on the Nitro System; %s is a %s.", inst.ID, inst.Type)
	}
	attached := c.instanceAttachments(inst.ID)
	for _, a := range attached {
		if a.Device == device {
			return Errorf(CodeInvalidParameterValue, "Invalid value '%s' for unixDevice. Attachment point %s is already in use", device, device)
		}
	}
	used := len(attached)
	if typ.LimitType == LimitShared {
		// Network interfaces and NVMe instance-store disks share the slots.
		used += len(inst.NetworkInterfaces) + typ.InstanceStoreNVMe
	}
	if used >= typ.MaxAttachments {
		return Errorf(CodeAttachmentLimitExceeded, "You have reached the maximum number of volume attachments (%d) for instance %s.", typ.MaxAttachments, inst.ID)
	}
	return nil
}

// attachmentTo returns the volume's attachment to an instance, or nil.
func (v *Volume) attachmentTo(instanceID string) *Attachment {
	for _, a := range v.Attachments {
		if a.InstanceID == instanceID {
			return a
		}
	}
	return nil
}

// DetachVolumeInput is a DetachVolume request; InstanceID and Device are
// optional checks, Force skips waiting for a busy device.
type DetachVolumeInput struct {
	VolumeID   string
	InstanceID string
	Device     string
	Force      bool
	DryRun     bool
}

// DetachVolume starts detaching a volume. The attachment is "detaching"
// until the Detach latency has passed and, for the local instance, the disk
// store has released the device; a device still mounted or open keeps it
// detaching (as a busy device does on EC2) unless Force is set.
func (c *Cloud) DetachVolume(in DetachVolumeInput) (Attachment, error) {
	var out Attachment
	err := c.do(func(now time.Time) error {
		v, e := c.volumeByID(in.VolumeID, 0, now)
		if e != nil {
			return e
		}
		if in.InstanceID != "" {
			if _, e := c.instanceByID(in.InstanceID); e != nil {
				return e
			}
		}
		a, e := detachTarget(v, in)
		if e != nil {
			return e
		}
		if in.DryRun {
			return dryRunError()
		}
		if a.State != AttachmentDetaching {
			a.State = AttachmentDetaching
			a.Due = c.latency.due(transitionDetach, v.ID, now)
			a.Stuck = false
			klog.V(2).InfoS("Volume detaching", "volumeID", v.ID, "instanceID", a.InstanceID, "force", in.Force)
		}
		a.Force = a.Force || in.Force
		c.markDirty()
		out = *a
		return nil
	})
	return out, err
}

// detachTarget picks the attachment a detach request means.
func detachTarget(v *Volume, in DetachVolumeInput) (*Attachment, *Error) {
	if len(v.Attachments) == 0 {
		return nil, Errorf(CodeIncorrectState, "Volume '%s' is in the '%s' state.", v.ID, v.State)
	}
	var a *Attachment
	switch {
	case in.InstanceID != "":
		a = v.attachmentTo(in.InstanceID)
		if a == nil {
			return nil, Errorf(CodeInvalidAttachmentNotFound, "The volume '%s' is not attached to instance '%s'.", v.ID, in.InstanceID)
		}
	case len(v.Attachments) > 1:
		return nil, Errorf(CodeInvalidParameterCombination, "Volume '%s' is attached to more than one instance; specify the instance ID.", v.ID)
	default:
		a = v.Attachments[0]
	}
	if in.Device != "" && in.Device != a.Device {
		return nil, Errorf(CodeInvalidAttachmentNotFound, "The volume '%s' is not attached to instance '%s' as device '%s'.", v.ID, a.InstanceID, in.Device)
	}
	if v.Root {
		return nil, Errorf(CodeIncorrectState, "Unable to detach root volume '%s' from instance '%s'", v.ID, a.InstanceID)
	}
	return a, nil
}

// ReleaseStuckAttachments lets every attachment held by the stuck-attach
// fault complete, and reports how many there were.
func (c *Cloud) ReleaseStuckAttachments() int {
	n := 0
	_ = c.do(func(time.Time) error {
		for _, v := range c.st.Volumes {
			for _, a := range v.Attachments {
				if a.Stuck {
					a.Stuck = false
					n++
				}
			}
		}
		if n > 0 {
			c.markDirty()
		}
		return nil
	})
	return n
}
