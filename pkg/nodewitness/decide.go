package nodewitness

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// offStates are the instance states in which EC2 says the guest is gone or
// going: nothing on the node can still write to its volumes once it is
// stopped, and a stopping or shutting-down guest is past serving them.
var offStates = []string{cloud.InstanceStopping, cloud.InstanceStopped, cloud.InstanceShuttingDown, cloud.InstanceTerminated}

// Decision is what the witness does about one Node; it is also the
// decision label of the decisions metric.
type Decision string

// The decisions.
const (
	// Taint: the Node is not Ready and EC2 says its instance is off or
	// gone; it gets the out-of-service taint.
	Taint Decision = "taint"
	// Untaint: the Node carries the witness's taint, is Ready again and
	// its instance runs; the taint goes. Also a Ready Node whose taint
	// someone removed by hand: the witness's annotation goes.
	Untaint Decision = "untaint"
	// Keep: the Node already carries the out-of-service taint and nothing
	// says it should go (or it is not the witness's to remove).
	Keep Decision = "keep"
	// InstanceRunning: the Node is not Ready but its instance runs (or is
	// starting), so its guest may still write: never tainted. A hung
	// guest is for a human to stop.
	InstanceRunning Decision = "instance-running"
	// Undecided: EC2 could not be asked, or the Node names no instance;
	// the witness does nothing rather than guess.
	Undecided Decision = "undecided"
	// Ready: a Ready Node without the witness's taint; nothing to do. Not
	// counted.
	Ready Decision = "ready"
)

// facts are what the witness knows of one Node when it decides.
type facts struct {
	// ready is the Node's Ready condition ("" when it has none).
	ready corev1.ConditionStatus
	// instanceID is the Node's instance; "" when it names none.
	instanceID string
	// instance is what EC2 says of it; nil when EC2 does not know it.
	instance *cloud.Instance
	// lookupErr is set when EC2 could not be asked (not when it does not
	// know the instance).
	lookupErr error
	// tainted: the Node carries the out-of-service taint; ours: the
	// witness put it there.
	tainted, ours bool
}

// decide is the witness's rule, with the evidence for the log and the
// Node's event. Only EC2's word that the instance is off makes a taint, and
// only a Ready Node whose instance runs loses the witness's taint; another
// component's out-of-service taint is never removed.
func decide(f facts) (Decision, string) {
	if f.ready == corev1.ConditionTrue {
		if f.ours && !f.tainted {
			return Untaint, "the out-of-service taint was removed by hand; the witness's annotation goes with it"
		}
		if f.tainted && f.ours {
			if f.instance != nil && f.instance.State == cloud.InstanceRunning {
				return Untaint, fmt.Sprintf("the Node is Ready and EC2 reports instance %s running", f.instanceID)
			}
			return Keep, fmt.Sprintf("the Node is Ready but EC2 does not report instance %s running", f.instanceID)
		}
		return Ready, "the Node is Ready"
	}
	switch {
	case f.tainted:
		return Keep, "the Node already carries the out-of-service taint"
	case f.instanceID == "":
		return Undecided, "the Node names no EC2 instance (no aws:// providerID, no instance ID from the CSI node plugin)"
	case f.lookupErr != nil:
		return Undecided, fmt.Sprintf("EC2 could not say what instance %s is doing: %v", f.instanceID, f.lookupErr)
	case f.instance == nil:
		return Taint, fmt.Sprintf("EC2 does not know instance %s (terminated long ago)", f.instanceID)
	case slices.Contains(offStates, f.instance.State):
		evidence := fmt.Sprintf("EC2 reports instance %s %s", f.instanceID, f.instance.State)
		if f.instance.StateTransitionReason != "" {
			evidence += ": " + f.instance.StateTransitionReason
		}
		return Taint, evidence
	}
	return InstanceRunning, fmt.Sprintf("EC2 reports instance %s %s: its guest may still use its volumes, so it is not tainted", f.instanceID, f.instance.State)
}
