package ec2api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// TestInstanceLifecycleThroughTheSDK stops, starts and terminates an
// instance with the SDK's calls and waiters, as an operator's tooling (or
// a driver asking whether a node's machine is off) would.
func TestInstanceLifecycleThroughTheSDK(t *testing.T) {
	lat := 150 * time.Millisecond
	f := newFixture(t, emulatortest.Options{
		Latencies: model.Latencies{InstanceStop: lat, InstanceStart: lat},
		Instances: []model.InstanceSpec{{Local: true}, {ID: "i-0d15c0000000000b2"}},
	})
	id := "i-0d15c0000000000b2"
	vol := f.volume(t, 1)
	f.attach(t, vol, id, "/dev/sdf")
	ids := []string{id}
	const wait = time.Minute

	stop, err := f.client.StopInstances(f.ctx, &ec2.StopInstancesInput{InstanceIds: ids, DryRun: aws.Bool(true)})
	if apiCode(err) != "DryRunOperation" {
		t.Fatalf("dry run: %+v, %v", stop, err)
	}
	stop, err = f.client.StopInstances(f.ctx, &ec2.StopInstancesInput{InstanceIds: ids, Force: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if c := stop.StoppingInstances[0]; c.PreviousState.Name != types.InstanceStateNameRunning || c.CurrentState.Name != types.InstanceStateNameStopping || aws.ToInt32(c.CurrentState.Code) != 64 {
		t.Fatalf("StopInstances answered %+v → %+v", c.PreviousState, c.CurrentState)
	}
	if _, err := f.client.StartInstances(f.ctx, &ec2.StartInstancesInput{InstanceIds: ids}); apiCode(err) != "IncorrectInstanceState" {
		t.Fatalf("start while stopping: %v", err)
	}
	stopped := func(o *ec2.InstanceStoppedWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 50*time.Millisecond
	}
	if err := ec2.NewInstanceStoppedWaiter(f.client, stopped).Wait(f.ctx, &ec2.DescribeInstancesInput{InstanceIds: ids}, wait); err != nil {
		t.Fatal(err)
	}
	out, err := f.client.DescribeInstances(f.ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if err != nil {
		t.Fatal(err)
	}
	in := out.Reservations[0].Instances[0]
	if !strings.HasPrefix(aws.ToString(in.StateTransitionReason), "User initiated (") || aws.ToString(in.StateReason.Code) != "Client.UserInitiatedShutdown" {
		t.Fatalf("a stopped instance's reason: %q, %+v", aws.ToString(in.StateTransitionReason), in.StateReason)
	}
	status, err := f.client.DescribeInstanceStatus(f.ctx, &ec2.DescribeInstanceStatusInput{InstanceIds: ids, IncludeAllInstances: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if s := status.InstanceStatuses[0]; s.InstanceState.Name != types.InstanceStateNameStopped || s.InstanceStatus.Status != types.SummaryStatusNotApplicable {
		t.Fatalf("a stopped instance's status: %s, %s", s.InstanceState.Name, s.InstanceStatus.Status)
	}

	if _, err := f.client.StartInstances(f.ctx, &ec2.StartInstancesInput{InstanceIds: ids}); err != nil {
		t.Fatal(err)
	}
	running := func(o *ec2.InstanceRunningWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 50*time.Millisecond
	}
	if err := ec2.NewInstanceRunningWaiter(f.client, running).Wait(f.ctx, &ec2.DescribeInstancesInput{InstanceIds: ids}, wait); err != nil {
		t.Fatal(err)
	}
	if err := f.env.Cloud().SetInstanceImpaired(id, true); err != nil {
		t.Fatal(err)
	}
	status, err = f.client.DescribeInstanceStatus(f.ctx, &ec2.DescribeInstanceStatusInput{
		Filters: []types.Filter{{Name: aws.String("instance-status.reachability"), Values: []string{"failed"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(status.InstanceStatuses) != 1 {
		t.Fatalf("instances failing reachability: %+v", status.InstanceStatuses)
	}
	s := status.InstanceStatuses[0]
	if d := s.InstanceStatus.Details; s.InstanceStatus.Status != types.SummaryStatusImpaired || len(d) != 1 || d[0].Status != types.StatusTypeFailed || d[0].ImpairedSince == nil {
		t.Fatalf("a hung guest's status: %s %+v", s.InstanceStatus.Status, d)
	}
	if s.SystemStatus.Status != types.SummaryStatusOk {
		t.Fatalf("a hung guest's system status: %s", s.SystemStatus.Status)
	}

	term, err := f.client.TerminateInstances(f.ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
	if err != nil || term.TerminatingInstances[0].CurrentState.Name != types.InstanceStateNameShuttingDown {
		t.Fatalf("TerminateInstances: %+v, %v", term, err)
	}
	terminated := func(o *ec2.InstanceTerminatedWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 50*time.Millisecond
	}
	if err := ec2.NewInstanceTerminatedWaiter(f.client, terminated).Wait(f.ctx, &ec2.DescribeInstancesInput{InstanceIds: ids}, wait); err != nil {
		t.Fatal(err)
	}
	if v := f.get(t, vol); v.State != types.VolumeStateAvailable {
		t.Fatalf("the terminated instance's volume is %s", v.State)
	}
}
