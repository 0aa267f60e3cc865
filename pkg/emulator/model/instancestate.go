package model

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// InstanceState is an instance's state as DescribeInstances reports it.
// The emulated instances are declared, never launched through the API; the
// API stops, starts and terminates them (StopInstances, StartInstances,
// TerminateInstances) through EC2's transitional states, and the admin API
// sets running or stopped at once: the machine behind a node lost, or back.
type InstanceState string

// The instance states, EC2's own.
const (
	InstancePending      InstanceState = "pending"
	InstanceRunning      InstanceState = "running"
	InstanceShuttingDown InstanceState = "shutting-down"
	InstanceTerminated   InstanceState = "terminated"
	InstanceStopping     InstanceState = "stopping"
	InstanceStopped      InstanceState = "stopped"
)

// terminatedVisible is how long a terminated instance stays in
// DescribeInstances' answers, as on EC2; after that its ID is unknown.
const terminatedVisible = time.Hour

// Code is EC2's numeric code of the state (instanceState.code).
func (s InstanceState) Code() int {
	switch s {
	case InstancePending:
		return 0
	case InstanceShuttingDown:
		return 32
	case InstanceTerminated:
		return 48
	case InstanceStopping:
		return 64
	case InstanceStopped:
		return 80
	}
	return 16
}

// StateValue is the instance's state; a state saved before states existed
// is running.
func (in Instance) StateValue() InstanceState {
	if in.State == "" {
		return InstanceRunning
	}
	return in.State
}

// StateTransitionReason is EC2's stateTransitionReason: why and when the
// instance last left running, empty while it runs as it was launched.
func (in Instance) StateTransitionReason() string {
	if in.StateReason == "" {
		return ""
	}
	return fmt.Sprintf("%s (%s)", in.StateReason, in.StateChanged.UTC().Format("2006-01-02 15:04:05 GMT"))
}

// InstanceStateChange is one instance's answer to StopInstances,
// StartInstances or TerminateInstances: its state before and after.
type InstanceStateChange struct {
	InstanceID string
	Previous   InstanceState
	Current    InstanceState
}

// userInitiated is the reason EC2 gives for a change a caller asked for.
const userInitiated = "User initiated"

// StopInstances stops running instances: stopping now, stopped after the
// InstanceStop latency, when the guest is gone and sees none of its
// volumes (they stay attached, as on EC2). An instance already stopping or
// stopped is left as it is; one pending, shutting down or terminated is
// IncorrectInstanceState, and then nothing changes for any instance named.
func (c *Cloud) StopInstances(ids []string, dryRun bool) ([]InstanceStateChange, error) {
	return c.changeInstances(ids, dryRun, instanceChange{to: InstanceStopping, takes: transitionInstanceStop, reason: userInitiated,
		from: []InstanceState{InstanceRunning}, same: []InstanceState{InstanceStopping, InstanceStopped}, verb: "stopped"})
}

// StartInstances starts stopped instances: pending now, running after the
// InstanceStart latency, when the guest sees its attached volumes again.
// A pending or running instance is left as it is; one stopping, shutting
// down or terminated is IncorrectInstanceState.
func (c *Cloud) StartInstances(ids []string, dryRun bool) ([]InstanceStateChange, error) {
	return c.changeInstances(ids, dryRun, instanceChange{to: InstancePending, takes: transitionInstanceStart,
		from: []InstanceState{InstanceStopped}, same: []InstanceState{InstancePending, InstanceRunning}, verb: "started"})
}

// TerminateInstances terminates instances in any state: shutting-down now,
// terminated after the InstanceStop latency, when volumes deleted on
// termination (the root volume) are deleted and every other volume is
// detached. A terminated instance is described for an hour, then unknown.
func (c *Cloud) TerminateInstances(ids []string, dryRun bool) ([]InstanceStateChange, error) {
	return c.changeInstances(ids, dryRun, instanceChange{to: InstanceShuttingDown, takes: transitionInstanceStop, reason: userInitiated,
		from: []InstanceState{InstancePending, InstanceRunning, InstanceStopping, InstanceStopped},
		same: []InstanceState{InstanceShuttingDown, InstanceTerminated}, verb: "terminated"})
}

// instanceChange is what one of StopInstances, StartInstances and
// TerminateInstances does to an instance.
type instanceChange struct {
	// to is the transitional state an instance in one of from enters, for
	// the latency of takes, with reason ("" when it will run again).
	to     InstanceState
	takes  transition
	reason string
	from   []InstanceState
	// same are the states left as they are; any other is
	// IncorrectInstanceState ("... from which it can be <verb>").
	same []InstanceState
	verb string
}

// changeInstances checks every instance named, then (unless dryRun)
// changes each: all of them or none, as EC2 answers a request naming an
// instance that cannot change with an error and changes nothing.
func (c *Cloud) changeInstances(ids []string, dryRun bool, ch instanceChange) ([]InstanceStateChange, error) {
	var out []InstanceStateChange
	err := c.do(func(now time.Time) error {
		if len(ids) == 0 {
			return Errorf(CodeMissingParameter, "The request must contain the parameter InstanceId")
		}
		ins, e := c.selectInstances(ids)
		if e != nil {
			return e
		}
		for _, in := range ins {
			if s := in.StateValue(); !slices.Contains(ch.from, s) && !slices.Contains(ch.same, s) {
				return Errorf(CodeIncorrectInstanceState, "The instance '%s' is not in a state from which it can be %s.", in.ID, ch.verb)
			}
		}
		if dryRun {
			return dryRunError()
		}
		for _, in := range ins {
			prev := in.StateValue()
			if slices.Contains(ch.from, prev) {
				in.State, in.StateDue, in.StateChanged, in.StateReason = ch.to, c.latency.due(ch.takes, in.ID, now), now.UTC(), ch.reason
				c.markDirty()
				klog.V(2).InfoS("Instance state changing", "instanceID", in.ID, "from", prev, "to", ch.to)
			}
			out = append(out, InstanceStateChange{InstanceID: in.ID, Previous: prev, Current: in.StateValue()})
		}
		return nil
	})
	return out, err
}

// advanceInstance ends a transitional state that is due, and forgets a
// terminated instance after terminatedVisible. It reports whether the
// instance is still known.
func (c *Cloud) advanceInstance(in *Instance, now time.Time) bool {
	state := in.StateValue()
	if state == InstanceTerminated {
		return now.Sub(in.StateChanged) < terminatedVisible
	}
	if in.StateDue.IsZero() || now.Before(in.StateDue) {
		return true
	}
	switch state {
	case InstanceStopping:
		c.settle(in, InstanceStopped, now)
	case InstancePending:
		c.settle(in, InstanceRunning, now)
	case InstanceShuttingDown:
		c.settle(in, InstanceTerminated, now)
		c.releaseVolumes(in, now)
	}
	return true
}

// settle puts an instance in a lasting state at once and shows its guest
// what that state lets it see: a stopped or terminated guest none of its
// volumes, a running one all that are attached. A guest that ran hung
// comes back well: a stop or start is what mends it.
func (c *Cloud) settle(in *Instance, state InstanceState, now time.Time) {
	in.State, in.StateDue, in.StateChanged = state, time.Time{}, now.UTC()
	if state == InstanceRunning {
		in.StateReason = ""
	} else {
		in.ImpairedSince = time.Time{}
	}
	c.markDirty()
	klog.InfoS("Instance state set", "instanceID", in.ID, "state", state)
	if in.View == nil {
		return
	}
	for _, v := range c.st.Volumes {
		a := v.attachmentTo(in.ID)
		if v.Root || a == nil || a.State != AttachmentAttached || a.HostDevice == "" {
			continue
		}
		var err error
		if state == InstanceRunning {
			err = in.View.Expose(v.ID, a.HostDevice)
		} else {
			err = in.View.Withdraw(v.ID, a.HostDevice)
		}
		if err != nil {
			klog.ErrorS(err, "Could not change what the instance sees of a volume", "instanceID", in.ID, "volumeID", v.ID, "state", state)
		}
	}
}

// releaseVolumes ends a terminated instance's attachments: a volume
// deleted on termination goes, every other one detaches (at once: nothing
// in the guest holds it any more).
func (c *Cloud) releaseVolumes(in *Instance, now time.Time) {
	for _, v := range c.st.Volumes {
		a := v.attachmentTo(in.ID)
		if a == nil {
			continue
		}
		if a.DeleteOnTermination && len(v.Attachments) == 1 {
			v.Attachments = nil
			v.State, v.Due = VolumeDeleting, now
			klog.V(2).InfoS("Volume deleting with its instance", "volumeID", v.ID, "instanceID", in.ID)
			continue
		}
		a.State, a.Force, a.Due = AttachmentDetaching, true, now
		klog.V(2).InfoS("Volume detaching from a terminated instance", "volumeID", v.ID, "instanceID", in.ID)
	}
	c.markDirty()
}

// SetInstanceState stops or starts an instance at once, without EC2's
// transitional states: the admin API's way of saying the machine behind a
// node is lost (stopped) or back (running). A stopped instance keeps its
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
		if s := in.StateValue(); s == state {
			return nil
		} else if s == InstanceShuttingDown || s == InstanceTerminated {
			return Errorf(CodeIncorrectInstanceState, "The instance '%s' is %s.", id, s)
		}
		if state == InstanceStopped {
			in.StateReason = "Server.InternalError"
		}
		c.settle(in, state, now)
		return nil
	})
}

// SetInstanceImpaired makes an instance's guest hang (true) or answer
// again (false) while the instance runs: DescribeInstanceStatus then
// reports its instance status check impaired (reachability failed) since
// that moment, as EC2 does for a guest whose kernel no longer answers. A
// stop and start mends it, as on EC2.
func (c *Cloud) SetInstanceImpaired(id string, impaired bool) error {
	return c.do(func(now time.Time) error {
		in := c.st.Instances[id]
		if in == nil {
			return Errorf(CodeInvalidInstanceIDNotFound, "The instance ID '%s' does not exist", id)
		}
		if impaired && in.StateValue() != InstanceRunning {
			return Errorf(CodeIncorrectInstanceState, "The instance '%s' is %s: only a running guest can hang.", id, in.StateValue())
		}
		switch {
		case impaired && in.ImpairedSince.IsZero():
			in.ImpairedSince = now.UTC()
		case !impaired:
			in.ImpairedSince = time.Time{}
		default:
			return nil
		}
		c.markDirty()
		klog.InfoS("Instance guest impaired", "instanceID", id, "impaired", impaired)
		return nil
	})
}

// running reports whether the attachment's instance runs: only a running
// guest sees its volumes.
func (c *Cloud) running(a *Attachment) bool {
	in := c.st.Instances[a.InstanceID]
	return in != nil && in.StateValue() == InstanceRunning
}
