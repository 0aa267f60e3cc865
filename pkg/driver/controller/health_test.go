package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/pkg/health"
)

func TestJudgeVolume(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	inUse := &cloud.Volume{ID: "vol-1", State: "in-use"}
	ok := &cloud.VolumeStatus{VolumeID: "vol-1", Status: "ok", IOEnabled: "passed", IOPerformance: "not-applicable"}
	with := func(change func(s *cloud.VolumeStatus)) *cloud.VolumeStatus {
		s := *ok
		change(&s)
		return &s
	}
	type finding struct {
		kind   health.Kind
		reason string
	}
	tests := []struct {
		name      string
		vol       *cloud.Volume
		status    *cloud.VolumeStatus
		statusErr error
		want      []finding
		message   []string // parts of the condition's message
	}{
		{name: "healthy", vol: inUse, status: ok, message: []string{"healthy"}},
		{name: "no status yet", vol: inUse, message: []string{"healthy", "no status checks"}},
		{name: "status unreadable", vol: inUse, statusErr: errors.New("UnauthorizedOperation"),
			message: []string{"healthy", "could not be read: UnauthorizedOperation"}},
		{name: "volume in state error", vol: &cloud.Volume{ID: "vol-1", State: "error"}, status: ok,
			want: []finding{{health.DataLoss, "VolumeError"}}, message: []string{"state error", "restore it from a snapshot"}},
		{name: "state error even when the status is unreadable", vol: &cloud.Volume{ID: "vol-1", State: "error"}, statusErr: errors.New("throttled"),
			want: []finding{{health.DataLoss, "VolumeError"}}},
		{name: "I/O disabled", vol: inUse, status: with(func(s *cloud.VolumeStatus) {
			s.Status, s.IOEnabled = "impaired", "failed"
			s.Events = []cloud.VolumeEvent{{ID: "evol-1", Type: "potential-data-inconsistency", Description: "Awaiting Action: Enable IO", NotBefore: now.Add(-time.Hour)}}
			s.Actions = []cloud.VolumeAction{{Code: "enable-volume-io", Description: "Enable volume I/O", EventID: "evol-1"}}
		}), want: []finding{{health.Inaccessible, "IODisabled"}, {health.Degraded, "EventPotentialDataInconsistency"}},
			message: []string{"enable-volume-io --volume-id vol-1", "since 2026-11-24T11:00:00Z", "EC2 asks for enable-volume-io (Enable volume I/O)"}},
		{name: "stalled", vol: inUse, status: with(func(s *cloud.VolumeStatus) { s.Status, s.IOPerformance = "impaired", "stalled" }),
			want: []finding{{health.Inaccessible, "IOStalled"}}},
		{name: "severely degraded", vol: inUse, status: with(func(s *cloud.VolumeStatus) { s.Status, s.IOPerformance = "warning", "severely-degraded" }),
			want: []finding{{health.Degraded, "IOPerformanceDegraded"}}, message: []string{"performance severely degraded"}},
		{name: "impaired without a reason given", vol: inUse, status: with(func(s *cloud.VolumeStatus) { s.Status = "impaired" }),
			want: []finding{{health.Degraded, "Impaired"}}, message: []string{"describe-volume-status --volume-ids vol-1"}},
		{name: "warning without a reason given", vol: inUse, status: with(func(s *cloud.VolumeStatus) { s.Status = "warning" }),
			want: []finding{{health.Degraded, "StatusWarning"}}},
		{name: "insufficient data is not a problem", vol: inUse, status: with(func(s *cloud.VolumeStatus) { s.Status = "insufficient-data" }),
			message: []string{"healthy", "still running"}},
		{name: "a scheduled event", vol: inUse, status: with(func(s *cloud.VolumeStatus) {
			s.Events = []cloud.VolumeEvent{{Type: "maintenance", NotBefore: now.Add(48 * time.Hour)}}
		}), want: []finding{{health.Degraded, "EventMaintenance"}}, message: []string{"scheduled for 2026-11-26T12:00:00Z"}},
		{name: "an event that is over", vol: inUse, status: with(func(s *cloud.VolumeStatus) {
			s.Events = []cloud.VolumeEvent{{ID: "evol-0", Type: "io-enabled", NotBefore: now.Add(-3 * time.Hour), NotAfter: now.Add(-2 * time.Hour)}}
			s.Actions = []cloud.VolumeAction{{Code: "enable-volume-io", EventID: "evol-0"}}
		}), message: []string{"EC2 asks for enable-volume-io on volume vol-1"}, want: []finding{{health.Degraded, "ActionRequired"}}},
		{name: "initializing", vol: inUse, status: with(func(s *cloud.VolumeStatus) {
			s.Initialization = &cloud.VolumeInitialization{Type: "default", Progress: 40, EstimatedSeconds: 90}
		}), message: []string{"healthy", "40% done, about 1m30s left"}},
		{name: "initialized", vol: inUse, status: with(func(s *cloud.VolumeStatus) {
			s.Initialization = &cloud.VolumeInitialization{Type: "default", Progress: 100}
		}), message: []string{"healthy"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := judgeVolume(tc.vol, tc.status, tc.statusErr, now)
			var got []finding
			for _, f := range r.Findings {
				got = append(got, finding{f.Kind, f.Reason})
				if f.Message == "" {
					t.Errorf("finding %s has no message", f.Reason)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("findings %v, want %v", got, tc.want)
			}
			msg := r.Message()
			for _, part := range tc.message {
				if !strings.Contains(msg, part) {
					t.Errorf("message %q does not contain %q", msg, part)
				}
			}
			if tc.name == "an event that is over" && strings.Contains(msg, "io-enabled") {
				t.Errorf("an event that is over is reported: %q", msg)
			}
		})
	}
}

func TestEventReason(t *testing.T) {
	for in, want := range map[string]string{
		"potential-data-inconsistency": "EventPotentialDataInconsistency",
		"io-performance:degraded":      "EventIoPerformanceDegraded",
		"":                             "Event",
	} {
		if got := eventReason(in); got != want {
			t.Errorf("eventReason(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestVolumeHealthFromEC2 runs the controller against the emulator with one
// of several volumes impaired: ListVolumes and ControllerGetVolume carry
// the condition (one DescribeVolumeStatus call per page), the CSI 1.13
// health RPCs report it, and a status that cannot be read leaves the
// listing working.
func TestVolumeHealthFromEC2(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	var ids []string
	for i := range 6 {
		ids = append(ids, h.createVolume(t, createReq(fmt.Sprintf("pvc-health-%d", i), 1, h.env.Zone())).VolumeId)
	}
	sick := ids[2]
	if err := h.env.Cloud().SetVolumeHealth(sick, model.VolumeHealth{
		Status: model.StatusImpaired, IOEnabled: model.CheckFailed,
		Events:  []model.VolumeEvent{{ID: "evol-1", Type: "potential-data-inconsistency", Description: "Awaiting Action: Enable IO", NotBefore: time.Now().Add(-time.Minute)}},
		Actions: []model.VolumeAction{{Code: "enable-volume-io", EventID: "evol-1"}},
	}); err != nil {
		t.Fatal(err)
	}

	for _, maxEntries := range []int32{0, 4} {
		before := h.env.Calls("DescribeVolumeStatus")
		pages := 0
		entries := map[string]*csi.ListVolumesResponse_Entry{}
		for token := ""; ; pages++ {
			resp, err := h.svc.ListVolumes(h.ctx(), &csi.ListVolumesRequest{MaxEntries: maxEntries, StartingToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range resp.GetEntries() {
				entries[e.GetVolume().GetVolumeId()] = e
			}
			if token = resp.GetNextToken(); token == "" {
				pages++
				break
			}
		}
		if n := h.env.Calls("DescribeVolumeStatus") - before; n != pages {
			t.Errorf("max %d: %d DescribeVolumeStatus calls for %d pages, want one per page", maxEntries, n, pages)
		}
		for _, id := range ids {
			abnormal, msg, ok := volumehealth.Condition(entries[id].GetStatus())
			if !ok || abnormal != (id == sick) {
				t.Errorf("max %d: %s condition %v %q (set: %v), want abnormal %v", maxEntries, id, abnormal, msg, ok, id == sick)
			}
			if id == sick && !strings.Contains(msg, "enable-volume-io --volume-id "+sick) {
				t.Errorf("condition of the impaired volume: %q", msg)
			}
		}
	}

	got, err := h.svc.ControllerGetVolume(h.ctx(), &csi.ControllerGetVolumeRequest{VolumeId: sick})
	if err != nil {
		t.Fatal(err)
	}
	if abnormal, msg, _ := volumehealth.Condition(got.GetStatus()); !abnormal || !strings.Contains(msg, "disabled I/O") {
		t.Errorf("ControllerGetVolume condition %v %q", abnormal, msg)
	}
	vh, err := h.svc.ControllerGetVolumeHealth(h.ctx(), &csi.ControllerGetVolumeHealthRequest{VolumeId: sick})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range vh.GetVolumeHealth().GetHealthStatuses() {
		reasons = append(reasons, e.GetReason())
	}
	if vh.GetVolumeHealth().GetVolumeId() != sick || !slices.Equal(reasons, []string{"IODisabled", "EventPotentialDataInconsistency"}) {
		t.Errorf("ControllerGetVolumeHealth = %v", vh)
	}
	well, err := h.svc.ControllerGetVolumeHealth(h.ctx(), &csi.ControllerGetVolumeHealthRequest{VolumeId: ids[0]})
	if err != nil || len(well.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Errorf("a healthy volume: %v, %v", well, err)
	}
	list, err := h.svc.ControllerListVolumeHealth(h.ctx(), &csi.ControllerListVolumeHealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetEntries()) != 1 || list.GetEntries()[0].GetVolumeId() != sick || list.GetNextToken() != "" {
		t.Errorf("ControllerListVolumeHealth = %v, want only %s", list, sick)
	}
	var listed []string
	for token := ""; ; {
		page, err := h.svc.ControllerListVolumeHealth(h.ctx(), &csi.ControllerListVolumeHealthRequest{MaxEntries: 1, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.GetEntries()) > 1 {
			t.Fatalf("a page of %d entries, max 1", len(page.GetEntries()))
		}
		for _, e := range page.GetEntries() {
			listed = append(listed, e.GetVolumeId())
		}
		if token = page.GetNextToken(); token == "" {
			break
		}
	}
	if !slices.Equal(listed, []string{sick}) {
		t.Errorf("paged ControllerListVolumeHealth listed %v, want only %s", listed, sick)
	}

	t.Run("bad input", func(t *testing.T) {
		_, err := h.svc.ControllerGetVolumeHealth(h.ctx(), &csi.ControllerGetVolumeHealthRequest{})
		wantCode(t, err, codes.InvalidArgument, "")
		_, err = h.svc.ControllerGetVolumeHealth(h.ctx(), &csi.ControllerGetVolumeHealthRequest{VolumeId: "vol-0123456789abcdef0"})
		wantCode(t, err, codes.NotFound, "")
		_, err = h.svc.ControllerListVolumeHealth(h.ctx(), &csi.ControllerListVolumeHealthRequest{StartingToken: "bogus"})
		wantCode(t, err, codes.Aborted, "")
	})

	t.Run("status unreadable", func(t *testing.T) {
		if err := h.env.Faults().Patch([]byte(`{"unauthorized":["DescribeVolumeStatus"]}`)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.env.Faults().Patch([]byte(`{"unauthorized":[]}`)) })
		entries := h.listAllVolumes(t, 0)
		if len(entries) != len(ids) {
			t.Fatalf("ListVolumes listed %d volumes, want %d", len(entries), len(ids))
		}
		for _, e := range entries {
			if abnormal, msg, ok := volumehealth.Condition(e.GetStatus()); !ok || abnormal || !strings.Contains(msg, "could not be read") {
				t.Errorf("%s: condition %v %q, want a healthy one saying the status could not be read", e.GetVolume().GetVolumeId(), abnormal, msg)
			}
		}
		_, err := h.svc.ControllerGetVolumeHealth(h.ctx(), &csi.ControllerGetVolumeHealthRequest{VolumeId: sick})
		wantCode(t, err, codes.PermissionDenied, "DescribeVolumeStatus")
	})

	// An EC2-API cloud without status checks (moto is one) is no failure:
	// health is the volumes' state, and every RPC answers, saying so.
	t.Run("a cloud without status checks", func(t *testing.T) {
		if err := h.env.Faults().Patch([]byte(`{"unsupported":["DescribeVolumeStatus"]}`)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.env.Faults().Patch([]byte(`{"unsupported":[]}`)) })
		for _, e := range h.listAllVolumes(t, 0) {
			if abnormal, msg, ok := volumehealth.Condition(e.GetStatus()); !ok || abnormal || !strings.Contains(msg, "offers no volume status checks") {
				t.Errorf("%s: condition %v %q, want a healthy one saying the cloud has no status checks", e.GetVolume().GetVolumeId(), abnormal, msg)
			}
		}
		vh, err := h.svc.ControllerGetVolumeHealth(h.ctx(), &csi.ControllerGetVolumeHealthRequest{VolumeId: sick})
		if err != nil || len(vh.GetVolumeHealth().GetHealthStatuses()) != 0 {
			t.Errorf("ControllerGetVolumeHealth = %v, %v; want an answer from the state alone (available: nothing wrong)", vh, err)
		}
		list, err := h.svc.ControllerListVolumeHealth(h.ctx(), &csi.ControllerListVolumeHealthRequest{})
		if err != nil || len(list.GetEntries()) != 0 {
			t.Errorf("ControllerListVolumeHealth = %v, %v; want no entries and no error", list, err)
		}
	})
}
