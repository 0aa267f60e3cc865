package nodewitness

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/diskplane/diskplane/pkg/cloud"
)

func TestDecide(t *testing.T) {
	const id = "i-0123456789abcdef0"
	in := func(state, reason string) *cloud.Instance {
		return &cloud.Instance{ID: id, State: state, StateTransitionReason: reason}
	}
	for _, tt := range []struct {
		name     string
		f        facts
		want     Decision
		evidence string // a part of the evidence
	}{
		{"ready", facts{ready: corev1.ConditionTrue, instanceID: id}, Ready, ""},
		{"not ready, stopped", facts{ready: corev1.ConditionFalse, instanceID: id, instance: in(cloud.InstanceStopped, "User initiated (2026-11-29 10:00:00 GMT)")},
			Taint, "instance i-0123456789abcdef0 stopped: User initiated (2026-11-29 10:00:00 GMT)"},
		{"unreachable, stopping", facts{ready: corev1.ConditionUnknown, instanceID: id, instance: in(cloud.InstanceStopping, "")}, Taint, "stopping"},
		{"unreachable, shutting down", facts{ready: corev1.ConditionUnknown, instanceID: id, instance: in(cloud.InstanceShuttingDown, "")}, Taint, "shutting-down"},
		{"unreachable, terminated", facts{ready: corev1.ConditionUnknown, instanceID: id, instance: in(cloud.InstanceTerminated, "")}, Taint, "terminated"},
		{"no Ready condition, unknown to EC2", facts{instanceID: id}, Taint, "does not know instance"},
		{"unreachable, running", facts{ready: corev1.ConditionUnknown, instanceID: id, instance: in(cloud.InstanceRunning, "")}, InstanceRunning, "running"},
		{"unreachable, pending", facts{ready: corev1.ConditionUnknown, instanceID: id, instance: in(cloud.InstancePending, "")}, InstanceRunning, "pending"},
		{"unreachable, EC2 failing", facts{ready: corev1.ConditionUnknown, instanceID: id, lookupErr: errors.New("throttled")}, Undecided, "throttled"},
		{"unreachable, no instance", facts{ready: corev1.ConditionUnknown}, Undecided, "no EC2 instance"},
		{"unreachable, tainted by someone", facts{ready: corev1.ConditionUnknown, instanceID: id, instance: in(cloud.InstanceStopped, ""), tainted: true}, Keep, ""},
		{"unreachable, our taint, running again", facts{ready: corev1.ConditionUnknown, instanceID: id, instance: in(cloud.InstanceRunning, ""), tainted: true, ours: true}, Keep, ""},
		{"ready, our taint, running", facts{ready: corev1.ConditionTrue, instanceID: id, instance: in(cloud.InstanceRunning, ""), tainted: true, ours: true}, Untaint, "running"},
		{"ready, our taint, EC2 failing", facts{ready: corev1.ConditionTrue, instanceID: id, lookupErr: errors.New("down"), tainted: true, ours: true}, Keep, ""},
		{"ready, our taint removed by hand", facts{ready: corev1.ConditionTrue, instanceID: id, instance: in(cloud.InstanceRunning, ""), ours: true}, Untaint, "removed by hand"},
		{"ready, someone's taint", facts{ready: corev1.ConditionTrue, instanceID: id, instance: in(cloud.InstanceRunning, ""), tainted: true}, Ready, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, evidence := decide(tt.f)
			if got != tt.want || !strings.Contains(evidence, tt.evidence) {
				t.Fatalf("decide(%+v) = %s, %q; want %s with %q", tt.f, got, evidence, tt.want, tt.evidence)
			}
		})
	}
}
