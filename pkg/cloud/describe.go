package cloud

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/batcher"
)

// Describe operations and their page limits.
const (
	opDescribeVolumes                    = "DescribeVolumes"
	opDescribeInstances                  = "DescribeInstances"
	opDescribeSnapshots                  = "DescribeSnapshots"
	opDescribeVolumesModifications       = "DescribeVolumesModifications"
	opDescribeAvailabilityZones          = "DescribeAvailabilityZones"
	describeVolumesPageMax               = 500
	describeSnapshotsPageMax             = 1000
	describeModificationsPageMax         = 500
	describeInstancesBatchMax            = 100
	filterValuesMax                      = 200 // EC2 takes at most this many values per filter
	batchTimeout                         = 30 * time.Second
	describePageMin                int32 = 5 // EC2's smallest MaxResults for these APIs
)

// volumeLookupSplitCodes are the errors with which EC2 fails a whole
// DescribeVolumes (or DescribeVolumeStatus) by ID for one of the volumes
// asked for.
var volumeLookupSplitCodes = []string{codeInvalidVolumeNotFound, "InvalidVolume.Malformed", "InvalidVolumeID.Malformed", "InvalidID"}

// lookups merges concurrent Describe lookups (see package batcher). Every
// wait polls through them, so a hundred volumes attaching at once cost a
// handful of DescribeVolumes calls instead of a hundred per second.
type lookups struct {
	volumes         *batcher.Batcher[string, types.Volume]
	volumesByName   *batcher.Batcher[string, []types.Volume]
	instances       *batcher.Batcher[string, types.Instance]
	snapshots       *batcher.Batcher[string, types.Snapshot]
	snapshotsByName *batcher.Batcher[string, []types.Snapshot]
	modifications   *batcher.Batcher[string, types.VolumeModification]
	statuses        *batcher.Batcher[string, types.VolumeStatusItem]
	closers         []func()
}

func newLookups(c *ec2Cloud) (*lookups, error) {
	opts := func(name string, size int, splitCodes ...string) batcher.Options {
		if c.cfg.DisableBatching {
			size = 1
		}
		o := batcher.Options{Name: name, MaxEntries: size, MaxDelay: c.cfg.BatchMaxDelay, IdleDelay: c.cfg.BatchIdleDelay, ExecTimeout: batchTimeout}
		if len(splitCodes) > 0 {
			o.SplitOnError = func(err error) bool {
				code := errorCode(err)
				for _, s := range splitCodes {
					if code == s {
						return true
					}
				}
				return false
			}
		}
		return o
	}
	l := &lookups{}
	fail := func(err error) (*lookups, error) {
		l.close()
		return nil, fmt.Errorf("start the Describe batchers: %w", err)
	}
	var err error
	if l.volumes, err = batcher.New(c.describeVolumesByID, opts("DescribeVolumes by ID", describeVolumesPageMax,
		volumeLookupSplitCodes...)); err != nil {
		return fail(err)
	}
	l.closers = append(l.closers, l.volumes.Close)
	if l.volumesByName, err = batcher.New(c.describeVolumesByName, opts("DescribeVolumes by name", filterValuesMax)); err != nil {
		return fail(err)
	}
	l.closers = append(l.closers, l.volumesByName.Close)
	if l.instances, err = batcher.New(c.describeInstancesByID, opts("DescribeInstances by ID", describeInstancesBatchMax,
		codeInvalidInstanceIDNotFound, "InvalidInstanceID.Malformed", "InvalidID")); err != nil {
		return fail(err)
	}
	l.closers = append(l.closers, l.instances.Close)
	if l.snapshots, err = batcher.New(c.describeSnapshotsByID, opts("DescribeSnapshots by ID", describeSnapshotsPageMax,
		"InvalidSnapshot.NotFound", "InvalidSnapshot.Malformed", "InvalidSnapshotID.Malformed", "InvalidID")); err != nil {
		return fail(err)
	}
	l.closers = append(l.closers, l.snapshots.Close)
	if l.snapshotsByName, err = batcher.New(c.describeSnapshotsByName, opts("DescribeSnapshots by name", filterValuesMax)); err != nil {
		return fail(err)
	}
	l.closers = append(l.closers, l.snapshotsByName.Close)
	if l.modifications, err = batcher.New(c.describeModificationsByVolume, opts("DescribeVolumesModifications", filterValuesMax)); err != nil {
		return fail(err)
	}
	l.closers = append(l.closers, l.modifications.Close)
	if l.statuses, err = batcher.New(c.describeVolumeStatusByID, opts("DescribeVolumeStatus", describeVolumeStatusBatchMax,
		volumeLookupSplitCodes...)); err != nil {
		return fail(err)
	}
	l.closers = append(l.closers, l.statuses.Close)
	return l, nil
}

// close stops every batcher that was started.
func (l *lookups) close() {
	for _, stop := range l.closers {
		stop()
	}
}

// lookupError turns a batched lookup's error into the cloud layer's: a key
// the batch found nothing for is ErrNotFound, the rest is classified.
func lookupError(op, what string, err error) error {
	switch {
	case errors.Is(err, batcher.ErrNotFound):
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	case errors.Is(err, batcher.ErrClosed):
		return fmt.Errorf("%s: the cloud provider is shut down: %w", what, ErrUnavailable)
	default:
		return classify(op, err)
	}
}

// describeVolume returns one volume by ID through the batcher.
func (c *ec2Cloud) describeVolume(ctx context.Context, id string) (types.Volume, error) {
	v, err := c.lookups.volumes.Get(ctx, id)
	if err != nil {
		return v, lookupError(opDescribeVolumes, "volume "+id, err)
	}
	return v, nil
}

// describeVolumesByID looks up ids, and with them the volumes the waits
// watch (see volumeWatches), whose reads it hands to those waits. When
// asking for the watched volumes too fails the call for a volume EC2 does
// not show (deleted meanwhile, or just created and not in its reads yet),
// they are asked for no more until a read finds them, and ids are looked
// up again alone.
func (c *ec2Cloud) describeVolumesByID(ctx context.Context, ids []string) (map[string]batcher.Result[types.Volume], error) {
	extras := c.watches.extras(ids, describeVolumesPageMax-len(ids))
	out, err := c.describeVolumesAndDeliver(ctx, append(slices.Clone(ids), extras...))
	if err != nil && len(extras) > 0 && slices.Contains(volumeLookupSplitCodes, errorCode(err)) {
		c.watches.hide(extras)
		return c.describeVolumesAndDeliver(ctx, ids)
	}
	return out, err
}

// describeVolumesAndDeliver reads the volumes ids by ID, hands the reads to
// the waits that watch them, and returns them by ID.
func (c *ec2Cloud) describeVolumesAndDeliver(ctx context.Context, ids []string) (map[string]batcher.Result[types.Volume], error) {
	out := make(map[string]batcher.Result[types.Volume], len(ids))
	asked := time.Now()
	p := ec2.NewDescribeVolumesPaginator(c.ec2, &ec2.DescribeVolumesInput{VolumeIds: ids})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, c.retry.use(opDescribeVolumes))
		if err != nil {
			return nil, err
		}
		c.watches.deliver(page.Volumes, asked, time.Now())
		for _, v := range page.Volumes {
			out[aws.ToString(v.VolumeId)] = batcher.Result[types.Volume]{Value: v}
		}
	}
	return out, nil
}

func (c *ec2Cloud) describeVolumesByName(ctx context.Context, names []string) (map[string]batcher.Result[[]types.Volume], error) {
	byName := map[string][]types.Volume{}
	p := ec2.NewDescribeVolumesPaginator(c.ec2, &ec2.DescribeVolumesInput{
		Filters:    []types.Filter{{Name: aws.String("tag:" + TagVolumeName), Values: names}},
		MaxResults: aws.Int32(describeVolumesPageMax),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, c.retry.use(opDescribeVolumes))
		if err != nil {
			return nil, err
		}
		for _, v := range page.Volumes {
			name := tagValue(v.Tags, TagVolumeName)
			byName[name] = append(byName[name], v)
		}
	}
	out := make(map[string]batcher.Result[[]types.Volume], len(byName))
	for name, vols := range byName {
		out[name] = batcher.Result[[]types.Volume]{Value: vols}
	}
	return out, nil
}

// describeInstance returns one instance by ID through the batcher.
func (c *ec2Cloud) describeInstance(ctx context.Context, id string) (types.Instance, error) {
	in, err := c.lookups.instances.Get(ctx, id)
	if err != nil {
		return in, lookupError(opDescribeInstances, "instance "+id, err)
	}
	return in, nil
}

func (c *ec2Cloud) describeInstancesByID(ctx context.Context, ids []string) (map[string]batcher.Result[types.Instance], error) {
	out := make(map[string]batcher.Result[types.Instance], len(ids))
	p := ec2.NewDescribeInstancesPaginator(c.ec2, &ec2.DescribeInstancesInput{InstanceIds: ids})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, c.retry.use(opDescribeInstances))
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				out[aws.ToString(in.InstanceId)] = batcher.Result[types.Instance]{Value: in}
			}
		}
	}
	return out, nil
}

// describeSnapshot returns one snapshot by ID through the batcher.
func (c *ec2Cloud) describeSnapshot(ctx context.Context, id string) (types.Snapshot, error) {
	s, err := c.lookups.snapshots.Get(ctx, id)
	if err != nil {
		return s, lookupError(opDescribeSnapshots, "snapshot "+id, err)
	}
	return s, nil
}

func (c *ec2Cloud) describeSnapshotsByID(ctx context.Context, ids []string) (map[string]batcher.Result[types.Snapshot], error) {
	out := make(map[string]batcher.Result[types.Snapshot], len(ids))
	p := ec2.NewDescribeSnapshotsPaginator(c.ec2, &ec2.DescribeSnapshotsInput{SnapshotIds: ids})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, c.retry.use(opDescribeSnapshots))
		if err != nil {
			return nil, err
		}
		for _, s := range page.Snapshots {
			out[aws.ToString(s.SnapshotId)] = batcher.Result[types.Snapshot]{Value: s}
		}
	}
	return out, nil
}

func (c *ec2Cloud) describeSnapshotsByName(ctx context.Context, names []string) (map[string]batcher.Result[[]types.Snapshot], error) {
	byName := map[string][]types.Snapshot{}
	p := ec2.NewDescribeSnapshotsPaginator(c.ec2, &ec2.DescribeSnapshotsInput{
		OwnerIds:   []string{"self"},
		Filters:    []types.Filter{{Name: aws.String("tag:" + TagSnapshotName), Values: names}},
		MaxResults: aws.Int32(describeSnapshotsPageMax),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, c.retry.use(opDescribeSnapshots))
		if err != nil {
			return nil, err
		}
		for _, s := range page.Snapshots {
			name := tagValue(s.Tags, TagSnapshotName)
			byName[name] = append(byName[name], s)
		}
	}
	out := make(map[string]batcher.Result[[]types.Snapshot], len(byName))
	for name, snaps := range byName {
		out[name] = batcher.Result[[]types.Snapshot]{Value: snaps}
	}
	return out, nil
}

// describeModification returns the latest modification of a volume; a
// volume never modified is ErrNotFound.
func (c *ec2Cloud) describeModification(ctx context.Context, volumeID string) (types.VolumeModification, error) {
	m, err := c.lookups.modifications.Get(ctx, volumeID)
	if err != nil {
		return m, lookupError(opDescribeVolumesModifications, "modification of volume "+volumeID, err)
	}
	return m, nil
}

// describeModificationsByVolume asks by the volume-id filter rather than by
// VolumeIds: EC2 fails a by-ID request for a volume that was never modified,
// which is the common case, while a filter simply leaves it out.
func (c *ec2Cloud) describeModificationsByVolume(ctx context.Context, ids []string) (map[string]batcher.Result[types.VolumeModification], error) {
	out := make(map[string]batcher.Result[types.VolumeModification], len(ids))
	p := ec2.NewDescribeVolumesModificationsPaginator(c.ec2, &ec2.DescribeVolumesModificationsInput{
		Filters:    []types.Filter{{Name: aws.String("volume-id"), Values: ids}},
		MaxResults: aws.Int32(describeModificationsPageMax),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, c.retry.use(opDescribeVolumesModifications))
		if err != nil {
			return nil, err
		}
		for _, m := range page.VolumesModifications {
			id := aws.ToString(m.VolumeId)
			if prev, ok := out[id]; ok && !aws.ToTime(m.StartTime).After(aws.ToTime(prev.Value.StartTime)) {
				continue
			}
			out[id] = batcher.Result[types.VolumeModification]{Value: m}
		}
	}
	return out, nil
}

// tagValue returns the value of key among EC2 tags, or "".
func tagValue(tags []types.Tag, key string) string {
	for _, t := range tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}
