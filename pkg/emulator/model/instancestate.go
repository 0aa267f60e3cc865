package model

import (
	"time"

	"k8s.io/klog/v2"
)

// InstanceState is an instance's state as DescribeInstances reports it. The
// emulated instances are declared, never launched through the API, so they
// run unless the admin API stops one: the machine behind a node is lost, or
// an operator shut it down.
type InstanceState string

// The instance states the emulator models.
const (
	InstanceRunning InstanceState = "running"
	InstanceStopped InstanceState = "stopped"
)

// Code is EC2's numeric code of the state (instanceState.code).
func (s InstanceState) Code() int {
	if s == InstanceStopped {
		return 80
	}
	return 16
}

// StateValue is the instance's state; a state saved before states existed
// is running.
func (in *Instance) StateValue() InstanceState {
	if in.State == "" {
		return InstanceRunning
	}
	return in.State
}

// SetInstanceState stops or starts an instance. A stopped instance keeps its
// volumes attached, as on EC2, but its guest sees none of them: its view
// withdraws them, a volume attached meanwhile is exposed only when it
// starts, and a detach completes at once even while the host still holds
// the device (nothing in the stopped guest can release it, so EC2 does not
// wait for it). Starting the instance exposes its attached volumes again.
func (c *Cloud) SetInstanceState(id string, state InstanceState) error {
	if state != InstanceRunning && state != InstanceStopped {
		return Errorf(CodeInvalidParameterValue, "instance state %q: want %s or %s", state, InstanceRunning, InstanceStopped)
	}
	return c.do(func(now time.Time) error {
		in := c.st.Instances[id]
		if in == nil {
			return Errorf(CodeInvalidInstanceIDNotFound, "The instance ID '%s' does not exist", id)
		}
		if in.StateValue() == state {
			return nil
		}
		in.State = state
		c.markDirty()
		klog.InfoS("Instance state set", "instanceID", id, "state", state)
		if in.View == nil {
			return nil
		}
		for _, v := range c.st.Volumes {
			a := v.attachmentTo(id)
			if v.Root || a == nil || a.State != AttachmentAttached || a.HostDevice == "" {
				continue
			}
			var err error
			if state == InstanceStopped {
				err = in.View.Withdraw(v.ID, a.HostDevice)
			} else {
				err = in.View.Expose(v.ID, a.HostDevice)
			}
			if err != nil {
				klog.ErrorS(err, "Could not change what the instance sees of a volume", "instanceID", id, "volumeID", v.ID, "state", state)
			}
		}
		return nil
	})
}

// running reports whether the attachment's instance runs: only a running
// guest sees its volumes.
func (c *Cloud) running(a *Attachment) bool {
	in := c.st.Instances[a.InstanceID]
	return in != nil && in.StateValue() == InstanceRunning
}
