package model

import (
	"strings"
	"testing"
	"time"
)

// instanceLatencies make every instance change take a while on the fake
// clock, and volume changes none.
var instanceLatencies = Latencies{InstanceStop: 40 * time.Second, InstanceStart: 20 * time.Second}

// instanceState is one instance's state as DescribeInstances shows it.
func (tc *testCloud) instanceState(t *testing.T, id string) InstanceView {
	t.Helper()
	page, err := tc.DescribeInstances(Query{IDs: []string{id}})
	if err != nil {
		t.Fatalf("DescribeInstances(%s): %v", id, err)
	}
	return page.Items[0]
}

// attached creates a volume and attaches it to instance id at once.
func (tc *testCloud) attached(t *testing.T, id, device string) Volume {
	t.Helper()
	v := tc.mustVolume(t, 1)
	if _, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: id, Device: device}); err != nil {
		t.Fatalf("AttachVolume: %v", err)
	}
	return tc.describe(t, v.ID)
}

func TestInstanceStopStartTerminate(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: instanceLatencies})
	id := tc.local(t).ID
	v := tc.attached(t, id, "/dev/sdf")
	if !tc.store.isAttached(v.ID) {
		t.Fatal("the attached volume has no device")
	}

	changes, err := tc.StopInstances([]string{id}, false)
	if err != nil || len(changes) != 1 || changes[0] != (InstanceStateChange{InstanceID: id, Previous: InstanceRunning, Current: InstanceStopping}) {
		t.Fatalf("StopInstances = %+v, %v", changes, err)
	}
	tc.clock.Advance(instanceLatencies.InstanceStop - time.Second)
	got := tc.instanceState(t, id)
	if got.StateValue() != InstanceStopping || got.StateTransitionReason() != "User initiated (2026-05-01 12:00:00 GMT)" {
		t.Fatalf("a second before the stop latency: %s, reason %q", got.StateValue(), got.StateTransitionReason())
	}
	tc.clock.Advance(time.Second)
	if s := tc.instanceState(t, id).StateValue(); s != InstanceStopped {
		t.Fatalf("after the stop latency: %s", s)
	}
	// EC2 keeps a stopped instance's volumes attached.
	if a := tc.describe(t, v.ID).Attachments; len(a) != 1 || a[0].State != AttachmentAttached {
		t.Fatalf("volume of the stopped instance: %+v", a)
	}

	if changes, err := tc.StartInstances([]string{id}, false); err != nil || changes[0].Current != InstancePending {
		t.Fatalf("StartInstances = %+v, %v", changes, err)
	}
	tc.clock.Advance(instanceLatencies.InstanceStart)
	if got := tc.instanceState(t, id); got.StateValue() != InstanceRunning || got.StateTransitionReason() != "" {
		t.Fatalf("after the start latency: %s, reason %q", got.StateValue(), got.StateTransitionReason())
	}

	if changes, err := tc.TerminateInstances([]string{id}, false); err != nil || changes[0].Current != InstanceShuttingDown {
		t.Fatalf("TerminateInstances = %+v, %v", changes, err)
	}
	root := tc.local(t).RootDevice
	tc.clock.Advance(instanceLatencies.InstanceStop)
	got = tc.instanceState(t, id)
	if got.StateValue() != InstanceTerminated || len(got.BlockDevices) != 0 {
		t.Fatalf("after the terminate latency: %s with %+v (root %s)", got.StateValue(), got.BlockDevices, root)
	}
	if vol := tc.describe(t, v.ID); vol.State != VolumeAvailable || tc.store.isAttached(v.ID) {
		t.Fatalf("the terminated instance's volume: %s, device %v", vol.State, tc.store.isAttached(v.ID))
	}
	for _, vol := range tc.Volumes() {
		if vol.Root {
			t.Fatalf("the root volume %s outlived its instance", vol.ID)
		}
	}
	if _, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: id, Device: "/dev/sdg"}); code(err) != CodeIncorrectInstanceState {
		t.Fatalf("attach to a terminated instance: %v", err)
	}
	tc.clock.Advance(terminatedVisible)
	if _, err := tc.DescribeInstances(Query{IDs: []string{id}}); code(err) != CodeInvalidInstanceIDNotFound {
		t.Fatalf("an hour after termination: %v, want %s", err, CodeInvalidInstanceIDNotFound)
	}
}

func TestInstanceStateChangeRules(t *testing.T) {
	// reach puts the local instance in a state through the API.
	reach := map[InstanceState]func(tc *testCloud, id string){
		InstanceRunning:  func(*testCloud, string) {},
		InstanceStopping: func(tc *testCloud, id string) { _, _ = tc.StopInstances([]string{id}, false) },
		InstanceStopped: func(tc *testCloud, id string) {
			_, _ = tc.StopInstances([]string{id}, false)
			tc.clock.Advance(instanceLatencies.InstanceStop)
		},
		InstancePending: func(tc *testCloud, id string) {
			_, _ = tc.StopInstances([]string{id}, false)
			tc.clock.Advance(instanceLatencies.InstanceStop)
			_, _ = tc.DescribeInstances(Query{})
			_, _ = tc.StartInstances([]string{id}, false)
		},
		InstanceShuttingDown: func(tc *testCloud, id string) { _, _ = tc.TerminateInstances([]string{id}, false) },
		InstanceTerminated: func(tc *testCloud, id string) {
			_, _ = tc.TerminateInstances([]string{id}, false)
			tc.clock.Advance(instanceLatencies.InstanceStop)
		},
	}
	ops := map[string]func(c *Cloud, ids []string, dryRun bool) ([]InstanceStateChange, error){
		"stop": (*Cloud).StopInstances, "start": (*Cloud).StartInstances, "terminate": (*Cloud).TerminateInstances,
	}
	for _, tt := range []struct {
		from InstanceState
		op   string
		want InstanceState // the current state answered; "" when refused
	}{
		{InstanceRunning, "stop", InstanceStopping},
		{InstanceRunning, "start", InstanceRunning},
		{InstanceRunning, "terminate", InstanceShuttingDown},
		{InstanceStopping, "stop", InstanceStopping},
		{InstanceStopping, "start", ""},
		{InstanceStopping, "terminate", InstanceShuttingDown},
		{InstanceStopped, "stop", InstanceStopped},
		{InstanceStopped, "start", InstancePending},
		{InstanceStopped, "terminate", InstanceShuttingDown},
		{InstancePending, "stop", ""},
		{InstancePending, "start", InstancePending},
		{InstancePending, "terminate", InstanceShuttingDown},
		{InstanceShuttingDown, "stop", ""},
		{InstanceShuttingDown, "start", ""},
		{InstanceShuttingDown, "terminate", InstanceShuttingDown},
		{InstanceTerminated, "stop", ""},
		{InstanceTerminated, "start", ""},
		{InstanceTerminated, "terminate", InstanceTerminated},
	} {
		t.Run(string(tt.from)+"/"+tt.op, func(t *testing.T) {
			tc := newTestCloud(t, Config{Latencies: instanceLatencies})
			id := tc.local(t).ID
			reach[tt.from](tc, id)
			if s := tc.instanceState(t, id).StateValue(); s != tt.from {
				t.Fatalf("set-up reached %s, not %s", s, tt.from)
			}
			changes, err := ops[tt.op](tc.Cloud, []string{id}, false)
			if tt.want == "" {
				if code(err) != CodeIncorrectInstanceState {
					t.Fatalf("%s from %s: %+v, %v; want %s", tt.op, tt.from, changes, err, CodeIncorrectInstanceState)
				}
				if s := tc.instanceState(t, id).StateValue(); s != tt.from {
					t.Fatalf("a refused %s moved the instance to %s", tt.op, s)
				}
				return
			}
			want := InstanceStateChange{InstanceID: id, Previous: tt.from, Current: tt.want}
			if err != nil || len(changes) != 1 || changes[0] != want {
				t.Fatalf("%s from %s: %+v, %v; want %+v", tt.op, tt.from, changes, err, want)
			}
		})
	}
}

func TestInstanceChangesAreAllOrNothing(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: instanceLatencies, Instances: []InstanceSpec{{Local: true}, {}}})
	ins := tc.Instances()
	a, b := ins[0].ID, ins[1].ID
	if _, err := tc.TerminateInstances([]string{b}, false); err != nil {
		t.Fatal(err)
	}
	draws := len(tc.Draws())
	for _, tt := range []struct {
		name string
		ids  []string
		dry  bool
		want string
	}{
		{"one cannot stop", []string{a, b}, false, CodeIncorrectInstanceState},
		{"one unknown", []string{a, "i-0123456789abcdef0"}, false, CodeInvalidInstanceIDNotFound},
		{"one malformed", []string{a, "vol-1"}, false, CodeInvalidInstanceIDMalformed},
		{"none", nil, false, CodeMissingParameter},
		{"dry run", []string{a}, true, CodeDryRunOperation},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tc.StopInstances(tt.ids, tt.dry); code(err) != tt.want {
				t.Fatalf("StopInstances(%v, dry %v): %v, want %s", tt.ids, tt.dry, err, tt.want)
			}
			if s := tc.instanceState(t, a).StateValue(); s != InstanceRunning {
				t.Fatalf("%s is %s after a refused request", a, s)
			}
		})
	}
	if n := len(tc.Draws()); n != draws {
		t.Fatalf("refused requests drew %d latencies", n-draws)
	}
}

func TestAttachToAnInstanceInTransition(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: instanceLatencies})
	id := tc.local(t).ID
	if _, err := tc.StopInstances([]string{id}, false); err != nil {
		t.Fatal(err)
	}
	v := tc.mustVolume(t, 1)
	if _, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: id, Device: "/dev/sdf"}); code(err) != CodeIncorrectInstanceState {
		t.Fatalf("attach to a stopping instance: %v", err)
	}
	tc.clock.Advance(instanceLatencies.InstanceStop)
	// EC2 attaches to a stopped instance; its guest sees the volume when it
	// starts.
	if _, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: id, Device: "/dev/sdf"}); err != nil {
		t.Fatalf("attach to a stopped instance: %v", err)
	}
}

func TestDescribeInstanceStatus(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: instanceLatencies, Instances: []InstanceSpec{{Local: true}, {}}})
	ins := tc.Instances()
	a, b := ins[0].ID, ins[1].ID
	status := func(q Query, all bool) map[string]InstanceStatus {
		t.Helper()
		page, err := tc.DescribeInstanceStatus(q, all)
		if err != nil {
			t.Fatalf("DescribeInstanceStatus(%+v, %v): %v", q, all, err)
		}
		out := map[string]InstanceStatus{}
		for _, s := range page.Items {
			out[s.InstanceID] = s
		}
		return out
	}
	if s := status(Query{}, false)[a]; s.Instance != StatusOK || s.InstanceReachability != CheckPassed || s.System != StatusOK {
		t.Fatalf("a running instance: %+v", s)
	}

	tc.clock.Advance(time.Minute)
	hung := tc.clock.Now()
	if err := tc.SetInstanceImpaired(a, true); err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(time.Minute)
	if s := status(Query{}, false)[a]; s.Instance != StatusImpaired || s.InstanceReachability != CheckFailed || !s.ImpairedSince.Equal(hung) || s.System != StatusOK {
		t.Fatalf("a hung guest: %+v, want impaired since %s", s, hung)
	}
	if got := status(Query{Filters: []Filter{{Name: "instance-status.status", Values: []string{"impaired"}}}}, false); len(got) != 1 || got[a].InstanceID == "" {
		t.Fatalf("filtered by impaired: %+v", got)
	}

	if _, err := tc.StopInstances([]string{b}, false); err != nil {
		t.Fatal(err)
	}
	if got := status(Query{IDs: []string{b}}, false); len(got) != 0 {
		t.Fatalf("a stopping instance is reported without IncludeAllInstances: %+v", got)
	}
	if s := status(Query{IDs: []string{b}}, true)[b]; s.State != InstanceStopping || s.Instance != StatusNotApplicable || s.System != StatusNotApplicable || s.InstanceReachability != "" {
		t.Fatalf("a stopping instance with IncludeAllInstances: %+v", s)
	}
	if err := tc.SetInstanceImpaired(b, true); code(err) != CodeIncorrectInstanceState {
		t.Fatalf("hanging a stopping instance: %v", err)
	}
	if _, err := tc.DescribeInstanceStatus(Query{IDs: []string{a}, MaxResults: 5}, false); code(err) != CodeInvalidParameterCombination {
		t.Fatalf("IDs with MaxResults: %v", err)
	}

	// A stop and start mends a hung guest, as on EC2.
	if _, err := tc.StopInstances([]string{a}, false); err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(instanceLatencies.InstanceStop)
	if _, err := tc.StartInstances([]string{a}, false); err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(instanceLatencies.InstanceStart)
	if s := status(Query{IDs: []string{a}}, false)[a]; s.Instance != StatusOK {
		t.Fatalf("after a stop and start: %+v", s)
	}
}

func TestAdminStateIsImmediate(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: instanceLatencies})
	id := tc.local(t).ID
	if err := tc.SetInstanceState(id, InstanceStopped); err != nil {
		t.Fatal(err)
	}
	got := tc.instanceState(t, id)
	if got.StateValue() != InstanceStopped || !strings.HasPrefix(got.StateTransitionReason(), "Server.InternalError (") {
		t.Fatalf("a lost machine: %s, reason %q", got.StateValue(), got.StateTransitionReason())
	}
	if err := tc.SetInstanceState(id, InstancePending); code(err) != CodeInvalidParameterValue {
		t.Fatalf("admin state pending: %v", err)
	}
	if err := tc.SetInstanceState(id, InstanceRunning); err != nil {
		t.Fatal(err)
	}
	if got := tc.instanceState(t, id); got.StateValue() != InstanceRunning || got.StateTransitionReason() != "" {
		t.Fatalf("back: %s, reason %q", got.StateValue(), got.StateTransitionReason())
	}
}
