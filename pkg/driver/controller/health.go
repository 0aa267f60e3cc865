package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
	"github.com/diskplane/diskplane/pkg/health"
)

// stateError is EC2's state of a volume whose storage failed.
const stateError = "error"

// EC2's io-performance values that mean a volume serves less than it should.
const (
	performanceDegraded         = "degraded"
	performanceSeverelyDegraded = "severely-degraded"
	performanceStalled          = "stalled"
)

// volumeReports judges the health of vols from EC2's view: their state and
// their status checks, looked up in one batched DescribeVolumeStatus call.
// When the status cannot be read, each report says so in a note and the
// error is returned too: ListVolumes and ControllerGetVolume still answer
// (the external-attacher reconciles attachments with ListVolumes), the
// health RPCs fail. A cloud that offers no status checks at all (an EC2-API
// cloud without DescribeVolumeStatus) is no failure: the reports are the
// volumes' state alone, each with a note saying so, and nothing is returned
// for the health RPCs to fail on, or they would fail forever.
func (s *Service) volumeReports(ctx context.Context, vols []*cloud.Volume) (map[string]health.Report, error) {
	ids := make([]string, 0, len(vols))
	for _, v := range vols {
		ids = append(ids, v.ID)
	}
	var statuses map[string]*cloud.VolumeStatus
	var err error
	if len(ids) > 0 {
		statuses, err = s.cloud.VolumeStatuses(ctx, ids)
		switch {
		case errors.Is(err, cloud.ErrUnsupported):
			klog.V(4).InfoS("This cloud offers no volume status checks; volume health is judged from the volumes' state only", "volumes", len(ids), "err", err)
		case err != nil:
			klog.ErrorS(err, "Could not read EC2's status checks; volume health is reported from the volumes' state only", "volumes", len(ids))
		}
	}
	now := time.Now()
	out := make(map[string]health.Report, len(vols))
	for _, v := range vols {
		out[v.ID] = judgeVolume(v, statuses[v.ID], err, now)
	}
	if errors.Is(err, cloud.ErrUnsupported) {
		return out, nil
	}
	return out, err
}

// judgeVolume is a volume's health from EC2's view at now. status is nil
// when EC2 reported none (statusErr says why, when it failed).
func judgeVolume(v *cloud.Volume, status *cloud.VolumeStatus, statusErr error, now time.Time) health.Report {
	var r health.Report
	if v.State == stateError {
		r.Add(health.DataLoss, "VolumeError", fmt.Sprintf("EC2 reports volume %s in state error: its storage failed and it cannot "+
			"serve I/O; its data may be lost, restore it from a snapshot", v.ID))
	}
	switch {
	case errors.Is(statusErr, cloud.ErrUnsupported):
		r.Note(fmt.Sprintf("this cloud offers no volume status checks (%v); health is judged from the volume's state only", statusErr))
	case statusErr != nil:
		r.Note(fmt.Sprintf("EC2's status checks could not be read: %v", statusErr))
	case status == nil:
		r.Note("EC2 reports no status checks for it yet")
	default:
		judgeStatus(&r, v.ID, status, now)
	}
	return r
}

// judgeStatus adds what EC2's status checks, events and actions say.
func judgeStatus(r *health.Report, volumeID string, st *cloud.VolumeStatus, now time.Time) {
	if st.IOEnabled == cloud.CheckFailed {
		r.Add(health.Inaccessible, "IODisabled", fmt.Sprintf("EC2 disabled I/O to volume %s after a potential data inconsistency "+
			"(io-enabled check failed): reads and writes fail until it is enabled; check the data (fsck on the node), then run "+
			"`aws ec2 enable-volume-io --volume-id %s`, or restore it from a snapshot", volumeID, volumeID))
	}
	switch st.IOPerformance {
	case performanceStalled:
		r.Add(health.Inaccessible, "IOStalled", "EC2 reports the volume's I/O stalled (io-performance check): it barely serves "+
			"I/O; if this lasts, restore a snapshot of it to a new volume")
	case performanceDegraded, performanceSeverelyDegraded:
		r.Add(health.Degraded, "IOPerformanceDegraded", fmt.Sprintf("EC2 reports the volume's performance %s (io-performance "+
			"check): it serves less than its provisioned IOPS and throughput", strings.ReplaceAll(st.IOPerformance, "-", " ")))
	}
	for _, e := range st.Events {
		if !e.NotAfter.IsZero() && !e.NotAfter.After(now) {
			continue // over
		}
		r.Add(health.Degraded, eventReason(e.Type), eventMessage(e, st.Actions, now))
	}
	for _, a := range st.Actions {
		if !hasCurrentEvent(st.Events, a.EventID, now) {
			msg := fmt.Sprintf("EC2 asks for %s on volume %s", a.Code, volumeID)
			if a.Description != "" {
				msg += ": " + a.Description
			}
			r.Add(health.Degraded, "ActionRequired", msg)
		}
	}
	if !r.Abnormal() {
		switch st.Status {
		case cloud.VolumeStatusImpaired:
			r.Add(health.Degraded, "Impaired", fmt.Sprintf("EC2 reports volume %s impaired (a status check failed); see "+
				"`aws ec2 describe-volume-status --volume-ids %s`", volumeID, volumeID))
		case cloud.VolumeStatusWarning:
			r.Add(health.Degraded, "StatusWarning", fmt.Sprintf("EC2 reports a warning for volume %s; see "+
				"`aws ec2 describe-volume-status --volume-ids %s`", volumeID, volumeID))
		}
	}
	if st.Status == cloud.VolumeStatusInsufficientData {
		r.Note("EC2's status checks are still running (insufficient-data)")
	}
	if in := st.Initialization; in != nil && in.Progress < 100 {
		r.Note(fmt.Sprintf("initializing from its snapshot: %d%% done, about %s left (a block not fetched yet is slow to read the first time)",
			in.Progress, time.Duration(in.EstimatedSeconds)*time.Second))
	}
}

// eventMessage describes a current or scheduled event and the actions EC2
// asks for with it.
func eventMessage(e cloud.VolumeEvent, actions []cloud.VolumeAction, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "EC2 event %s", e.Type)
	if e.Description != "" {
		fmt.Fprintf(&b, " (%s)", e.Description)
	}
	switch {
	case e.NotBefore.After(now):
		fmt.Fprintf(&b, " scheduled for %s", e.NotBefore.UTC().Format(time.RFC3339))
	case !e.NotBefore.IsZero():
		fmt.Fprintf(&b, " since %s", e.NotBefore.UTC().Format(time.RFC3339))
	}
	for _, a := range actions {
		if a.EventID != "" && a.EventID == e.ID {
			fmt.Fprintf(&b, ", EC2 asks for %s", a.Code)
			if a.Description != "" {
				fmt.Fprintf(&b, " (%s)", a.Description)
			}
		}
	}
	return b.String()
}

// hasCurrentEvent reports whether id names an event that is not over.
func hasCurrentEvent(events []cloud.VolumeEvent, id string, now time.Time) bool {
	for _, e := range events {
		if id != "" && e.ID == id && (e.NotAfter.IsZero() || e.NotAfter.After(now)) {
			return true
		}
	}
	return false
}

// eventReason is an event type in CamelCase: potential-data-inconsistency
// becomes EventPotentialDataInconsistency.
func eventReason(eventType string) string {
	var b strings.Builder
	b.WriteString("Event")
	for _, w := range strings.FieldsFunc(eventType, func(r rune) bool { return r == '-' || r == '_' || r == ' ' || r == ':' }) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// ControllerGetVolumeHealth reports one volume's health from EC2's view
// (CSI 1.13): its state, status checks, events and actions.
func (s *Service) ControllerGetVolumeHealth(ctx context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	v, err := s.volumeByID(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	reports, err := s.volumeReports(ctx, []*cloud.Volume{v})
	if err != nil {
		return nil, failed(err, "health of volume %s", v.ID)
	}
	return &csi.ControllerGetVolumeHealthResponse{VolumeHealth: volumehealth.VolumeHealth(v.ID, reports[v.ID])}, nil
}

// ControllerListVolumeHealth lists the volumes ListVolumes lists that have something
// wrong (CSI 1.13), page by page like ListVolumes; healthy volumes are left
// out, so a page may hold fewer entries than asked for, or none, and still
// have a next token.
func (s *Service) ControllerListVolumeHealth(ctx context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	vols, next, err := paginate(ctx, "volumes", req.GetStartingToken(), req.GetMaxEntries(), s.fetchVolumes)
	if err != nil {
		return nil, err
	}
	reports, err := s.volumeReports(ctx, vols)
	if err != nil {
		return nil, failed(err, "health of %d volumes", len(vols))
	}
	resp := &csi.ControllerListVolumeHealthResponse{NextToken: next}
	for _, v := range vols {
		if r := reports[v.ID]; r.Abnormal() {
			resp.Entries = append(resp.Entries, volumehealth.VolumeHealth(v.ID, r))
		}
	}
	return resp, nil
}

// fetchVolumes reads one cloud page of the volumes a PersistentVolume may
// name (see ListVolumes), leaving out volumes being deleted (for Kubernetes
// they are already gone) and those an instance was launched with.
func (s *Service) fetchVolumes(ctx context.Context, token string, size int32) ([]*cloud.Volume, string, error) {
	page, err := s.cloud.ListVolumes(ctx, cloud.ListOptions{MaxResults: size, NextToken: token})
	if err != nil {
		return nil, "", err
	}
	vols := make([]*cloud.Volume, 0, len(page.Volumes))
	for _, v := range page.Volumes {
		if v.State != stateDeleting && v.State != stateDeleted && !launchedWithInstance(v) {
			vols = append(vols, v)
		}
	}
	return vols, page.NextToken, nil
}
