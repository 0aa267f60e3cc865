package cloud

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/batcher"
)

// opDescribeVolumeStatus is EC2's volume health API.
const opDescribeVolumeStatus = "DescribeVolumeStatus"

// describeVolumeStatusBatchMax is the most volume IDs one
// DescribeVolumeStatus call carries: a whole ListVolumes page of the
// controller (500 volumes at most) in one call.
const describeVolumeStatusBatchMax = 500

// The values of EC2's volume status checks Diskplane acts on.
const (
	// VolumeStatusOK and the others are the overall status.
	VolumeStatusOK               = string(types.VolumeStatusInfoStatusOk)
	VolumeStatusImpaired         = string(types.VolumeStatusInfoStatusImpaired)
	VolumeStatusWarning          = string(types.VolumeStatusInfoStatusWarning)
	VolumeStatusInsufficientData = string(types.VolumeStatusInfoStatusInsufficientData)
	// CheckFailed is the io-enabled check when EC2 disabled the volume's I/O.
	CheckFailed = "failed"
)

// VolumeStatus is EC2's view of a volume's health: the status checks it
// runs every few minutes, the events it raised and the actions it asks
// for, and how far a volume restored from a snapshot has initialized. It
// is not the volume's state (Volume.State): a volume in state "error" may
// report "ok" here.
type VolumeStatus struct {
	VolumeID string
	// Status is ok, impaired (a check failed), warning (performance below
	// expectations) or insufficient-data (the checks are still running).
	Status string
	// IOEnabled is the io-enabled check: passed, or failed when EC2
	// disabled the volume's I/O after a potential data inconsistency; ""
	// when EC2 did not report it.
	IOEnabled string
	// IOPerformance is the io-performance check of io1, io2 and gp3
	// volumes: normal, degraded, severely-degraded, stalled,
	// not-applicable or insufficient-data; "" when not reported.
	IOPerformance string
	// InitializationState is the initialization-state check, when reported.
	InitializationState string
	// Events are what EC2 raised about the volume, current and past.
	Events []VolumeEvent
	// Actions are what EC2 asks of the volume's owner (e.g. enable-volume-io).
	Actions []VolumeAction
	// Initialization is set for a volume created from a snapshot.
	Initialization *VolumeInitialization
}

// VolumeEvent is one event EC2 raised about a volume.
type VolumeEvent struct {
	ID          string
	Type        string // e.g. potential-data-inconsistency
	Description string
	InstanceID  string
	// NotBefore is when it starts (in the future: scheduled); NotAfter when
	// it ended (zero: not yet).
	NotBefore, NotAfter time.Time
}

// VolumeAction is an action EC2 asks for, tied to an event.
type VolumeAction struct {
	Code        string // e.g. enable-volume-io
	Description string
	EventID     string
	EventType   string
}

// VolumeInitialization is how far a volume created from a snapshot has
// fetched its blocks; until it is done, the first read of a block is slow.
type VolumeInitialization struct {
	// Type is default, provisioned-rate or volume-copy.
	Type string
	// Progress is the percentage done; EstimatedSeconds what is left.
	Progress, EstimatedSeconds int64
}

// VolumeStatuses returns EC2's status of each volume (DescribeVolumeStatus),
// looked up together with concurrent lookups: a page of volumes costs one
// call per 500 volumes, never one per volume. A volume EC2 does not know is
// missing from the answer.
func (c *ec2Cloud) VolumeStatuses(ctx context.Context, volumeIDs []string) (map[string]*VolumeStatus, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	results, err := c.lookups.statuses.GetMany(ctx, volumeIDs)
	if err != nil {
		return nil, fmt.Errorf("status of %d volumes: %w", len(volumeIDs), classify(opDescribeVolumeStatus, err))
	}
	out := make(map[string]*VolumeStatus, len(results))
	for id, r := range results {
		if r.Err == nil {
			out[id] = toVolumeStatus(r.Value)
			continue
		}
		// A volume deleted meanwhile is missing, the others still count.
		if err := lookupError(opDescribeVolumeStatus, "status of volume "+id, r.Err); !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	return out, nil
}

// describeVolumeStatusByID asks by VolumeIds (EC2 refuses MaxResults with
// them, and has no volume-id filter for this API); an unknown ID fails the
// whole call, which the batcher splits down to that ID.
func (c *ec2Cloud) describeVolumeStatusByID(ctx context.Context, ids []string) (map[string]batcher.Result[types.VolumeStatusItem], error) {
	out := make(map[string]batcher.Result[types.VolumeStatusItem], len(ids))
	p := ec2.NewDescribeVolumeStatusPaginator(c.ec2, &ec2.DescribeVolumeStatusInput{VolumeIds: ids})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, c.retry.use(opDescribeVolumeStatus))
		if err != nil {
			return nil, err
		}
		for _, s := range page.VolumeStatuses {
			out[aws.ToString(s.VolumeId)] = batcher.Result[types.VolumeStatusItem]{Value: s}
		}
	}
	return out, nil
}

// toVolumeStatus converts EC2's status item into the driver's terms.
func toVolumeStatus(s types.VolumeStatusItem) *VolumeStatus {
	out := &VolumeStatus{VolumeID: aws.ToString(s.VolumeId)}
	if s.VolumeStatus != nil {
		out.Status = string(s.VolumeStatus.Status)
		for _, d := range s.VolumeStatus.Details {
			switch d.Name {
			case types.VolumeStatusNameIoEnabled:
				out.IOEnabled = aws.ToString(d.Status)
			case types.VolumeStatusNameIoPerformance:
				out.IOPerformance = aws.ToString(d.Status)
			case types.VolumeStatusNameInitializationState:
				out.InitializationState = aws.ToString(d.Status)
			}
		}
	}
	for _, e := range s.Events {
		out.Events = append(out.Events, VolumeEvent{
			ID: aws.ToString(e.EventId), Type: aws.ToString(e.EventType), Description: aws.ToString(e.Description),
			InstanceID: aws.ToString(e.InstanceId), NotBefore: aws.ToTime(e.NotBefore), NotAfter: aws.ToTime(e.NotAfter),
		})
	}
	for _, a := range s.Actions {
		out.Actions = append(out.Actions, VolumeAction{
			Code: aws.ToString(a.Code), Description: aws.ToString(a.Description),
			EventID: aws.ToString(a.EventId), EventType: aws.ToString(a.EventType),
		})
	}
	if i := s.InitializationStatusDetails; i != nil {
		out.Initialization = &VolumeInitialization{
			Type: string(i.InitializationType), Progress: aws.ToInt64(i.Progress), EstimatedSeconds: aws.ToInt64(i.EstimatedTimeToCompleteInSeconds),
		}
	}
	return out
}
