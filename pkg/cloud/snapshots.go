package cloud

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"
)

// snapshotSendKey is the sendLog key of the CreateSnapshot requests of a name.
func snapshotSendKey(name string) string { return "snapshot/" + name }

// CreateSnapshot snapshots a volume for the CSI snapshot name. EC2's
// CreateSnapshot has no ClientToken, so the name tag is what makes it
// idempotent: a snapshot already carrying the name is returned when it is of
// the same volume and is ErrAlreadyExists when it is of another. One of that
// name that failed is an error (ErrUnexpected) and is left for the caller
// to delete by its ID: the caller may hold that ID from an earlier answer,
// so a replacement under another ID would leave it pointing at nothing and
// the replacement unaccounted for. The request is never repeated blindly:
// after a failure that may have been applied (a server error, a dropped
// connection, a timeout), and while a request for the name, this process's
// or a previous one's, is recent enough that EC2's reads may not show its
// snapshot yet, the name is looked up until the snapshot shows or the reads
// can be trusted (see sendLog). A previous process counts only when
// opts.Intent, recorded before anything is sent, says one recorded itself
// for the name; without an Intent any may have. It does not wait for the
// snapshot to complete.
func (c *ec2Cloud) CreateSnapshot(ctx context.Context, name, sourceVolumeID string, opts *CreateSnapshotOptions) (*Snapshot, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if name == "" || sourceVolumeID == "" {
		return nil, fmt.Errorf("a snapshot needs a name and a source volume: %w", ErrInvalidArgument)
	}
	earlierProcesses, err := recordSnapshotIntent(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	if err := c.awaitLookupTick(ctx); err != nil {
		return nil, err
	}
	key := snapshotSendKey(name)
	for {
		var snap *Snapshot
		found, err := c.awaitSettled(ctx, key, earlierProcesses, "a snapshot named "+name, func(ctx context.Context) (bool, error) {
			s, err := c.snapshotNamed(ctx, name, sourceVolumeID)
			snap = s
			return s != nil, err
		})
		if err != nil || found {
			return snap, err
		}
		snap, err = c.sendCreateSnapshot(ctx, name, sourceVolumeID, opts)
		switch {
		case err == nil:
			return snap, nil
		case refused(err) || ctx.Err() != nil:
			return nil, classify(opCreateSnapshot, err)
		}
		klog.InfoS("CreateSnapshot failed and may have been applied; looking for the snapshot by name before asking again",
			"name", name, "volumeID", sourceVolumeID, "err", err)
	}
}

// recordSnapshotIntent records this process's intent to send CreateSnapshot
// for name, when the caller gave a place for it, and reports whether a
// previous process may have sent one: always without such a place; with
// one, only when another process recorded itself before.
func recordSnapshotIntent(ctx context.Context, name string, opts *CreateSnapshotOptions) (bool, error) {
	if opts == nil || opts.Intent == nil {
		return true, nil
	}
	others, err := opts.Intent.Record(ctx)
	if err != nil {
		return false, fmt.Errorf("snapshot %q: could not record that this controller may ask EC2 for it, which a successor must know before it asks: %w: %w",
			name, ErrRetryLater, err)
	}
	klog.V(4).InfoS("Recorded the intent to create a snapshot", "name", name, "otherProcessesBefore", others)
	return others, nil
}

// snapshotNamed returns the snapshot that carries name, or nil when there
// is none: one of another volume is ErrAlreadyExists, one that failed
// ErrUnexpected.
func (c *ec2Cloud) snapshotNamed(ctx context.Context, name, sourceVolumeID string) (*Snapshot, error) {
	existing, err := c.snapshotsNamed(ctx, name)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	for _, s := range existing {
		switch {
		case s.SourceVolumeID != sourceVolumeID:
			return nil, fmt.Errorf("snapshot name %q is taken by %s, a snapshot of volume %s, not %s: %w",
				name, s.ID, s.SourceVolumeID, sourceVolumeID, ErrAlreadyExists)
		case s.State == snapshotError:
			return nil, fmt.Errorf("snapshot %s (%q) of volume %s failed in EC2 (%s); delete it (deleting the VolumeSnapshot does) and take a new one: %w",
				s.ID, name, sourceVolumeID, s.StateMessage, ErrUnexpected)
		default:
			klog.V(4).InfoS("Snapshot with this name exists", "name", name, "snapshotID", s.ID, "state", s.State)
			return s, nil
		}
	}
	return nil, nil
}

// sendCreateSnapshot sends one CreateSnapshot (retried only when
// throttled) and records it in the sendLog unless EC2 refused it.
func (c *ec2Cloud) sendCreateSnapshot(ctx context.Context, name, sourceVolumeID string, opts *CreateSnapshotOptions) (*Snapshot, error) {
	tags := map[string]string{}
	if opts != nil {
		maps.Copy(tags, opts.Tags)
	}
	tags[TagSnapshotName] = name
	klog.V(2).InfoS("Creating snapshot", "name", name, "volumeID", sourceVolumeID)
	out, err := c.ec2.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{
		VolumeId:          aws.String(sourceVolumeID),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSnapshot, Tags: ec2Tags(tags)}},
	}, c.retry.use(opCreateSnapshot))
	c.sends.record(snapshotSendKey(name), err)
	if err != nil {
		return nil, err
	}
	snap := toSnapshot(types.Snapshot{
		SnapshotId: out.SnapshotId, VolumeId: out.VolumeId, VolumeSize: out.VolumeSize, State: out.State,
		Tags: out.Tags, StartTime: out.StartTime,
	})
	klog.V(2).InfoS("Snapshot created", "name", name, "snapshotID", snap.ID, "volumeID", sourceVolumeID, "state", snap.State)
	return snap, nil
}

// DeleteSnapshot deletes a snapshot; one that does not exist is ErrNotFound.
func (c *ec2Cloud) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	klog.V(2).InfoS("Deleting snapshot", "snapshotID", snapshotID)
	_, err := c.ec2.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String(snapshotID)}, c.retry.use(opDeleteSnapshot))
	return classify(opDeleteSnapshot, err)
}

// GetSnapshot returns one snapshot by ID; concurrent lookups share a call.
func (c *ec2Cloud) GetSnapshot(ctx context.Context, snapshotID string) (*Snapshot, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	s, err := c.describeSnapshot(ctx, snapshotID)
	if err != nil {
		return nil, err
	}
	return toSnapshot(s), nil
}

// GetSnapshotByName returns the snapshot tagged with the CSI snapshot name
// (the oldest, should there be several).
func (c *ec2Cloud) GetSnapshotByName(ctx context.Context, name string) (*Snapshot, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	snaps, err := c.snapshotsNamed(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(snaps) == 0 {
		return nil, fmt.Errorf("no snapshot is named %q: %w", name, ErrNotFound)
	}
	return snaps[0], nil
}

// snapshotsNamed returns the account's snapshots tagged with name, oldest
// first; none is ErrNotFound.
func (c *ec2Cloud) snapshotsNamed(ctx context.Context, name string) ([]*Snapshot, error) {
	raw, err := c.lookups.snapshotsByName.Get(ctx, name)
	if err != nil {
		return nil, lookupError(opDescribeSnapshots, fmt.Sprintf("snapshot named %q", name), err)
	}
	snaps := make([]*Snapshot, 0, len(raw))
	for _, s := range raw {
		snaps = append(snaps, toSnapshot(s))
	}
	slices.SortFunc(snaps, func(a, b *Snapshot) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return snaps, nil
}

// ListSnapshots returns one page of the account's snapshots, all or those of
// one source volume.
func (c *ec2Cloud) ListSnapshots(ctx context.Context, opts SnapshotListOptions) (*SnapshotPage, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	in := &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}}
	if opts.SourceVolumeID != "" {
		in.Filters = append(in.Filters, types.Filter{Name: aws.String("volume-id"), Values: []string{opts.SourceVolumeID}})
	}
	if opts.TagKey != "" {
		in.Filters = append(in.Filters, types.Filter{Name: aws.String("tag-key"), Values: []string{opts.TagKey}})
	}
	items, next, err := listPage(opts.NextToken, opts.MaxResults, describeSnapshotsPageMax,
		func(token *string, size *int32) ([]types.Snapshot, *string, error) {
			in.NextToken, in.MaxResults = token, size
			out, err := c.ec2.DescribeSnapshots(ctx, in, c.retry.use(opDescribeSnapshots))
			if err != nil {
				return nil, nil, classify(opDescribeSnapshots, err)
			}
			return out.Snapshots, out.NextToken, nil
		})
	if err != nil {
		return nil, err
	}
	page := &SnapshotPage{NextToken: next}
	for _, s := range items {
		page.Snapshots = append(page.Snapshots, toSnapshot(s))
	}
	return page, nil
}

// WaitForSnapshot polls until a snapshot is completed. A snapshot that
// failed is returned with an error wrapping ErrUnexpected.
func (c *ec2Cloud) WaitForSnapshot(ctx context.Context, snapshotID string) (*Snapshot, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	var snap *Snapshot
	err := c.poll(ctx, func(ctx context.Context) (bool, string, error) {
		s, err := c.describeSnapshot(ctx, snapshotID)
		if err != nil {
			return false, "", err
		}
		snap = toSnapshot(s)
		switch snap.State {
		case snapshotCompleted:
			return true, "", nil
		case snapshotError:
			return false, "", fmt.Errorf("snapshot %s failed: %s: %w", snapshotID, aws.ToString(s.StateMessage), ErrUnexpected)
		default:
			return false, fmt.Sprintf("snapshot %s is %s (%s)", snapshotID, snap.State, aws.ToString(s.Progress)), nil
		}
	})
	return snap, err
}
