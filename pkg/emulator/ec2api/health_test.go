package ec2api_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// TestDescribeVolumeStatusReportsHealth sets a volume's health in the model,
// as the admin API does, and reads it back through the SDK the way the
// controller does: status, checks, events with their times, actions,
// initialization, and the filters on all of them.
func TestDescribeVolumeStatusReportsHealth(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	sick, well := f.volume(t, 1), f.volume(t, 1)
	f.attach(t, sick, f.local, "/dev/sdf")
	since := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	h := model.VolumeHealth{
		Status: model.StatusImpaired, IOEnabled: model.CheckFailed, IOPerformance: model.PerformanceStalled,
		Events: []model.VolumeEvent{{ID: "evol-1", Type: "potential-data-inconsistency", Description: "Awaiting Action: Enable IO",
			InstanceID: f.local, NotBefore: since}},
		Actions:        []model.VolumeAction{{Code: "enable-volume-io", Description: "Enable volume I/O", EventID: "evol-1", EventType: "potential-data-inconsistency"}},
		Initialization: &model.VolumeInitialization{Type: "provisioned-rate", Progress: 40, EstimatedSeconds: 90},
	}
	if err := f.env.Cloud().SetVolumeHealth(sick, h); err != nil {
		t.Fatal(err)
	}

	out, err := f.client.DescribeVolumeStatus(f.ctx, &ec2.DescribeVolumeStatusInput{VolumeIds: []string{sick, well}})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]types.VolumeStatusItem{}
	for _, s := range out.VolumeStatuses {
		byID[aws.ToString(s.VolumeId)] = s
	}
	st := byID[sick]
	details := map[types.VolumeStatusName]string{}
	for _, d := range st.VolumeStatus.Details {
		details[d.Name] = aws.ToString(d.Status)
	}
	if st.VolumeStatus.Status != types.VolumeStatusInfoStatusImpaired || details[types.VolumeStatusNameIoEnabled] != "failed" ||
		details[types.VolumeStatusNameIoPerformance] != "stalled" {
		t.Errorf("status %s, details %v; want impaired, io-enabled failed, io-performance stalled", st.VolumeStatus.Status, details)
	}
	if len(st.Events) != 1 || aws.ToString(st.Events[0].EventType) != "potential-data-inconsistency" || aws.ToString(st.Events[0].EventId) != "evol-1" ||
		!aws.ToTime(st.Events[0].NotBefore).Equal(since) || st.Events[0].NotAfter != nil || aws.ToString(st.Events[0].InstanceId) != f.local {
		t.Errorf("events %+v", st.Events)
	}
	if len(st.Actions) != 1 || aws.ToString(st.Actions[0].Code) != "enable-volume-io" || aws.ToString(st.Actions[0].EventId) != "evol-1" {
		t.Errorf("actions %+v", st.Actions)
	}
	if in := st.InitializationStatusDetails; in == nil || in.InitializationType != types.InitializationTypeProvisionedRate ||
		aws.ToInt64(in.Progress) != 40 || aws.ToInt64(in.EstimatedTimeToCompleteInSeconds) != 90 {
		t.Errorf("initialization %+v", st.InitializationStatusDetails)
	}
	if len(st.AttachmentStatuses) != 1 || aws.ToString(st.AttachmentStatuses[0].IoPerformance) != "stalled" {
		t.Errorf("attachment statuses %+v", st.AttachmentStatuses)
	}
	if w := byID[well]; w.VolumeStatus.Status != types.VolumeStatusInfoStatusOk || len(w.Events) != 0 || w.InitializationStatusDetails != nil {
		t.Errorf("a volume nobody set: %+v", w)
	}

	for _, fl := range []types.Filter{
		filter("volume-status.status", "impaired"), filter("volume-status.details-status", "failed"),
		filter("event.event-type", "potential-data-inconsistency"), filter("action.code", "enable-volume-io"),
		filter("event.not-before", since.Format(model.TimeFormat)),
	} {
		got, err := f.client.DescribeVolumeStatus(f.ctx, &ec2.DescribeVolumeStatusInput{Filters: []types.Filter{fl}})
		if err != nil || len(got.VolumeStatuses) != 1 || aws.ToString(got.VolumeStatuses[0].VolumeId) != sick {
			t.Errorf("filter %s=%v: %d volumes, %v; want only %s", aws.ToString(fl.Name), fl.Values, len(got.VolumeStatuses), err, sick)
		}
	}
	oks, err := f.client.DescribeVolumeStatus(f.ctx, &ec2.DescribeVolumeStatusInput{Filters: []types.Filter{filter("volume-status.status", "ok")}})
	if err != nil {
		t.Fatal(err)
	}
	okIDs := map[string]bool{}
	for _, s := range oks.VolumeStatuses {
		okIDs[aws.ToString(s.VolumeId)] = true
	}
	if !okIDs[well] || okIDs[sick] {
		t.Errorf("status ok lists %v; want %s and not %s", okIDs, well, sick)
	}

	// Healthy again: the whole setting is replaced.
	if err := f.env.Cloud().SetVolumeHealth(sick, model.VolumeHealth{}); err != nil {
		t.Fatal(err)
	}
	again, err := f.client.DescribeVolumeStatus(f.ctx, &ec2.DescribeVolumeStatusInput{VolumeIds: []string{sick}})
	if err != nil || again.VolumeStatuses[0].VolumeStatus.Status != types.VolumeStatusInfoStatusOk || len(again.VolumeStatuses[0].Events) != 0 {
		t.Errorf("after clearing: %+v, %v", again.VolumeStatuses, err)
	}
}

// TestSetVolumeHealthRefusesWhatEC2NeverSays checks the model's validation:
// values outside EC2's, an event without a type or ending before it starts,
// an unknown volume.
func TestSetVolumeHealthRefusesWhatEC2NeverSays(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	id := f.volume(t, 1)
	now := time.Now()
	for name, h := range map[string]model.VolumeHealth{
		"status":          {Status: "sick"},
		"io-enabled":      {IOEnabled: "maybe"},
		"io-performance":  {IOPerformance: "slowish"},
		"event type":      {Events: []model.VolumeEvent{{ID: "evol-1"}}},
		"event window":    {Events: []model.VolumeEvent{{Type: "degraded", NotBefore: now, NotAfter: now.Add(-time.Hour)}}},
		"action code":     {Actions: []model.VolumeAction{{EventID: "evol-1"}}},
		"init type":       {Initialization: &model.VolumeInitialization{Type: "lazy", Progress: 5}},
		"init progress":   {Initialization: &model.VolumeInitialization{Type: "default", Progress: 101}},
		"init no type":    {Initialization: &model.VolumeInitialization{Progress: 5}},
		"negative remain": {Initialization: &model.VolumeInitialization{Type: "default", EstimatedSeconds: -1}},
	} {
		if err := f.env.Cloud().SetVolumeHealth(id, h); !isModelCode(err, model.CodeInvalidParameterValue) {
			t.Errorf("%s: %v, want %s", name, err, model.CodeInvalidParameterValue)
		}
	}
	if err := f.env.Cloud().SetVolumeHealth("vol-0123456789abcdef0", model.VolumeHealth{}); !isModelCode(err, model.CodeInvalidVolumeNotFound) {
		t.Errorf("unknown volume: %v", err)
	}
}

// isModelCode reports whether err is the model's error with that EC2 code.
func isModelCode(err error, code string) bool {
	var me *model.Error
	return errors.As(err, &me) && me.Code == code
}
