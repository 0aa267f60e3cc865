package cloud

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"
)

// errVolumeLost means a volume this call waited for will never become
// available: it went to "error", is being deleted, or has been missing from
// DescribeVolumes for longer than EC2's eventual consistency explains.
var errVolumeLost = errors.New("volume lost")

// volumeSendKey is the sendLog key of the CreateVolume requests of a name.
func volumeSendKey(name string) string { return "volume/" + name }

// volumeRequest is a validated CreateVolume request with everything derived
// from it; building the EC2 input from it is deterministic, so a retry
// sends EC2 exactly the same parameters (EC2 compares them per ClientToken).
type volumeRequest struct {
	name      string
	opts      CreateVolumeOptions
	volType   VolumeType
	iops      int32
	encrypted bool
	zone      string // for CreateVolume; empty for a clone (it follows its source)
	zoneID    string
	tags      map[string]string
}

// CreateVolume creates a volume for the CSI volume name and waits until it
// is available. A live volume carrying the name is returned when it matches
// the request (and is ErrAlreadyExists when it does not); otherwise the
// volume is created with the name's ClientToken sequence (see clientToken),
// so neither a retry nor a restarted controller ever makes a second volume
// for one name, whatever changed between attempts. The name is looked up
// first only when a volume may carry it that EC2 no longer knows by its
// token (see volumeNameIndex): for a younger one, the token is the lookup.
func (c *ec2Cloud) CreateVolume(ctx context.Context, name string, opts *CreateVolumeOptions) (*Volume, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if opts == nil {
		opts = &CreateVolumeOptions{}
	}
	req, err := c.newVolumeRequest(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	if c.names.mayExist(ctx, name, c.listVolumeNames) {
		if err := c.awaitLookupTick(ctx); err != nil {
			return nil, err
		}
		vol, err := c.existingVolume(ctx, req)
		if err != nil || vol != nil {
			return vol, err
		}
	}
	vol, err := c.createWithTokens(ctx, req)
	if err == nil {
		c.tokens.done(name)
	}
	return vol, err
}

// newVolumeRequest validates the options and works out the rest: the type,
// the IOPS, the zone (for a clone, the source's) and the tags.
func (c *ec2Cloud) newVolumeRequest(ctx context.Context, name string, opts *CreateVolumeOptions) (*volumeRequest, error) {
	if name == "" {
		return nil, fmt.Errorf("a volume needs a name: %w", ErrInvalidArgument)
	}
	req := &volumeRequest{name: name, opts: *opts, volType: opts.Type, encrypted: opts.Encrypted || opts.KMSKeyID != ""}
	if req.volType == "" {
		req.volType = DefaultVolumeType
	}
	switch {
	case opts.SizeGiB < 0:
		return nil, fmt.Errorf("size %d GiB: %w", opts.SizeGiB, ErrInvalidArgument)
	case opts.SizeGiB == 0 && opts.SnapshotID == "" && opts.SourceVolumeID == "":
		return nil, fmt.Errorf("a new empty volume needs a size: %w", ErrInvalidArgument)
	case opts.Zone != "" && opts.ZoneID != "":
		return nil, fmt.Errorf("zone %s and zone ID %s: give one of them: %w", opts.Zone, opts.ZoneID, ErrInvalidArgument)
	case opts.SnapshotID != "" && opts.SourceVolumeID != "":
		return nil, fmt.Errorf("a volume comes from a snapshot or from another volume, not both: %w", ErrInvalidArgument)
	case opts.MultiAttach && req.volType != VolumeTypeIO2 && req.volType != VolumeTypeIO1:
		return nil, fmt.Errorf("multi-attach needs an io1 or io2 volume, not %s: %w", req.volType, ErrInvalidArgument)
	}
	var err error
	if req.iops, err = volumeIOPS(&CreateVolumeOptions{Type: req.volType, SizeGiB: opts.SizeGiB, IOPS: opts.IOPS,
		IOPSPerGiB: opts.IOPSPerGiB, AllowIOPSPerGiBIncrease: opts.AllowIOPSPerGiBIncrease}); err != nil {
		return nil, err
	}
	req.tags = maps.Clone(opts.Tags)
	if req.tags == nil {
		req.tags = map[string]string{}
	}
	req.tags[TagVolumeName] = name

	if opts.SourceVolumeID != "" {
		src, err := c.GetVolume(ctx, opts.SourceVolumeID)
		if err != nil {
			return nil, fmt.Errorf("source volume of the clone: %w", err)
		}
		if (opts.Zone != "" && opts.Zone != src.Zone) || (opts.ZoneID != "" && src.ZoneID != "" && opts.ZoneID != src.ZoneID) {
			return nil, fmt.Errorf("a clone stays in its source's zone %s (%s), not %s%s: %w",
				src.Zone, src.ZoneID, opts.Zone, opts.ZoneID, ErrInvalidArgument)
		}
		return req, nil
	}
	req.zone, req.zoneID = opts.Zone, opts.ZoneID
	if req.zone == "" && req.zoneID == "" {
		if req.zone, err = c.pickZone(ctx, name); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// pickZone chooses a zone for a volume the caller placed nowhere: a hash of
// the name, so every retry picks the same zone (a different zone would be
// different parameters for the same ClientToken) while names spread evenly.
func (c *ec2Cloud) pickZone(ctx context.Context, name string) (string, error) {
	zones, err := c.AvailabilityZones(ctx)
	if err != nil {
		return "", err
	}
	if len(zones) == 0 {
		return "", fmt.Errorf("the region has no available zone: %w", ErrUnavailable)
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return zones[h.Sum32()%uint32(len(zones))].Name, nil
}

// mismatch says how an existing volume differs from the request, or "" when
// it is what was asked for: by the caller's judgement when it gave one
// (CreateVolumeOptions.Mismatch), by the options otherwise. Tags are not
// compared: they describe the volume, they do not make it another one.
func (r *volumeRequest) mismatch(v *Volume) string {
	if r.opts.Mismatch != nil {
		return r.opts.Mismatch(v)
	}
	var diffs []string
	differ := func(what string, have, want any) {
		diffs = append(diffs, fmt.Sprintf("%s is %v, not %v", what, have, want))
	}
	o := r.opts
	if o.SizeGiB != 0 && v.SizeGiB != o.SizeGiB {
		differ("size (GiB)", v.SizeGiB, o.SizeGiB)
	}
	if v.Type != r.volType {
		differ("type", v.Type, r.volType)
	}
	if r.zone != "" && v.Zone != r.zone {
		differ("zone", v.Zone, r.zone)
	}
	if r.zoneID != "" && v.ZoneID != "" && v.ZoneID != r.zoneID {
		differ("zone ID", v.ZoneID, r.zoneID)
	}
	if r.iops != 0 && v.IOPS != r.iops {
		differ("IOPS", v.IOPS, r.iops)
	}
	if o.Throughput != 0 && v.Throughput != o.Throughput {
		differ("throughput (MiB/s)", v.Throughput, o.Throughput)
	}
	if r.encrypted && !v.Encrypted {
		differ("encryption", "off", "on")
	}
	if o.SnapshotID != "" && v.SnapshotID != o.SnapshotID {
		differ("source snapshot", v.SnapshotID, o.SnapshotID)
	}
	if o.SourceVolumeID != "" && v.SourceVolumeID != o.SourceVolumeID {
		differ("source volume", v.SourceVolumeID, o.SourceVolumeID)
	}
	if v.MultiAttach != o.MultiAttach {
		differ("multi-attach", v.MultiAttach, o.MultiAttach)
	}
	return strings.Join(diffs, ", ")
}

// existingVolume returns the live volume that already carries the request's
// name, waiting until it is available (a volume the lookup found ready is
// returned as found), or nil when there is none. A volume that differs from
// the request is ErrAlreadyExists.
func (c *ec2Cloud) existingVolume(ctx context.Context, req *volumeRequest) (*Volume, error) {
	vols, err := c.volumesNamed(ctx, req.name)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var diffs []string
	for _, v := range vols {
		diff := req.mismatch(v)
		if diff != "" {
			diffs = append(diffs, v.ID+": "+diff)
			continue
		}
		klog.V(4).InfoS("Volume with this name exists", "name", req.name, "volumeID", v.ID, "state", v.State)
		if v.State == volumeAvailable || v.State == volumeInUse {
			return v, nil
		}
		vol, err := c.waitVolumeAvailable(ctx, v.ID, time.Time{}, time.Now())
		if errors.Is(err, errVolumeLost) {
			continue
		}
		return vol, err
	}
	if len(diffs) == 0 {
		return nil, nil
	}
	return nil, fmt.Errorf("volume name %q is taken by a volume with other parameters (%s): %w",
		req.name, strings.Join(diffs, "; "), ErrAlreadyExists)
}

// createWithTokens walks the name's ClientTokens from the first one not
// known to be spent (see clientToken) and makes the volume with the first
// one EC2 takes: a new token makes it, a token an earlier attempt used with
// the same parameters returns that attempt's volume. It waits until the
// volume is available.
func (c *ec2Cloud) createWithTokens(ctx context.Context, req *volumeRequest) (*Volume, error) {
	key := volumeSendKey(req.name)
	// A request sent again may be answered with what the first one made,
	// done long ago: only a first request's answer times the change.
	again := c.sends.unsettled(key, false) > 0
	first := c.tokens.next(req.name)
	for n := first; n < first+tokensPerCall; n++ {
		klog.V(2).InfoS("Creating volume", "name", req.name, "clientToken", n, "type", req.volType,
			"sizeGiB", req.opts.SizeGiB, "zone", req.zone+req.zoneID, "snapshotID", req.opts.SnapshotID, "sourceVolumeID", req.opts.SourceVolumeID)
		created, sent, err := c.sendCreate(ctx, req, clientToken(req.name, n))
		answered := time.Now()
		c.sends.record(key, err)
		if errorCode(err) == codeIdempotentParameterMismatch {
			vol, err := c.tokenRefused(ctx, req, n)
			if err != nil || vol != nil {
				return vol, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if created.State == volumeAvailable || created.State == volumeInUse {
			if !again && created.State == volumeAvailable {
				c.doneInAnswer(transitionCreate, "volumeID", created.ID)
			}
			return created, nil
		}
		vol, err := c.waitVolumeAvailable(ctx, created.ID, sent, answered)
		if errors.Is(err, errVolumeLost) {
			return nil, c.volumeFailed(ctx, req, n, vol, err)
		}
		if err == nil {
			klog.V(2).InfoS("Volume available", "name", req.name, "volumeID", vol.ID, "zone", vol.Zone)
		}
		return vol, err
	}
	return nil, fmt.Errorf("volume %q: EC2 refused client tokens %d to %d (each one's volume is gone); the next attempt goes on from token %d: %w",
		req.name, first, first+tokensPerCall-1, first+tokensPerCall, ErrRetryLater)
}

// tokenRefused handles EC2's IdempotentParameterMismatch for token n: the
// token was used with other parameters, or its volume is gone. Before the
// walk moves on, the name is looked up again: a live volume carrying it is
// the one (returned, or ErrAlreadyExists if it cannot serve the request).
// With none, the token is spent only once a lookup can be trusted to show
// a volume an earlier attempt made; until then the call asks to be retried.
// A nil volume and error means the walk moves to the next token.
func (c *ec2Cloud) tokenRefused(ctx context.Context, req *volumeRequest, n int) (*Volume, error) {
	vol, err := c.existingVolume(ctx, req)
	if err != nil || vol != nil {
		return vol, err
	}
	if left := c.sends.unsettled(volumeSendKey(req.name), true); left > 0 {
		return nil, fmt.Errorf("volume %q: EC2 refused client token %d (used before with other parameters, or its volume is gone), "+
			"and a volume an earlier attempt made may not show in DescribeVolumes for another %s; not making another one before: %w",
			req.name, n, left.Round(time.Second), ErrRetryLater)
	}
	klog.InfoS("Client token used before with other parameters or for a volume that is gone, and no volume carries the name; trying the next one",
		"name", req.name, "clientToken", n)
	c.tokens.spent(req.name, n)
	return nil, nil
}

// volumeFailed handles a volume made with token n that will never become
// available: one in "error" holds no data and is deleted; the token is
// spent. The call asks to be retried rather than making the next volume at
// once, so a cause that persists (a KMS key the role cannot use) costs one
// volume per attempt of the caller, and the first attempt after the cause
// is fixed succeeds.
func (c *ec2Cloud) volumeFailed(ctx context.Context, req *volumeRequest, n int, vol *Volume, lost error) error {
	klog.InfoS("Volume made with this client token is lost; the next attempt makes a new one", "name", req.name,
		"clientToken", n, "err", lost)
	if vol != nil && vol.State == volumeError {
		if derr := c.DeleteVolume(ctx, vol.ID); derr != nil && !errors.Is(derr, ErrNotFound) {
			klog.ErrorS(derr, "Could not delete a failed volume", "volumeID", vol.ID)
		}
	}
	c.tokens.spent(req.name, n)
	return fmt.Errorf("volume %q (client token %d): %w (when a volume goes to error, check that the role may use its KMS key); the next attempt makes a new one: %w",
		req.name, n, lost, ErrRetryLater)
}

// sendCreate sends CreateVolume, or CopyVolumes for a clone, and returns
// the volume and when the attempt EC2 answered was sent (see sentAt). The
// error is classified and still answers errorCode (it wraps the SDK's
// error).
func (c *ec2Cloud) sendCreate(ctx context.Context, req *volumeRequest, token string) (*Volume, time.Time, error) {
	o := req.opts
	tagSpec := []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: ec2Tags(req.tags)}}
	optional := func(v int32) *int32 {
		if v == 0 {
			return nil
		}
		return aws.Int32(v)
	}
	var encrypted, multiAttach *bool
	if req.encrypted {
		encrypted = aws.Bool(true)
	}
	if o.MultiAttach {
		multiAttach = aws.Bool(true)
	}
	var kms *string
	if o.KMSKeyID != "" {
		kms = aws.String(o.KMSKeyID)
	}
	called := time.Now()
	if o.SourceVolumeID != "" {
		out, err := c.ec2.CopyVolumes(ctx, &ec2.CopyVolumesInput{
			SourceVolumeId: aws.String(o.SourceVolumeID), ClientToken: aws.String(token),
			Size: optional(o.SizeGiB), VolumeType: types.VolumeType(req.volType), Iops: optional(req.iops),
			Throughput: optional(o.Throughput), Encrypted: encrypted, KmsKeyId: kms,
			MultiAttachEnabled: multiAttach, TagSpecifications: tagSpec,
		}, c.retry.use(opCopyVolumes))
		if err != nil {
			return nil, time.Time{}, classify(opCopyVolumes, err)
		}
		if len(out.Volumes) != 1 {
			return nil, time.Time{}, fmt.Errorf("CopyVolumes returned %d volumes instead of one: %w", len(out.Volumes), ErrUnexpected)
		}
		return toVolume(out.Volumes[0]), sentAt(out.ResultMetadata, called), nil
	}
	in := &ec2.CreateVolumeInput{
		ClientToken: aws.String(token), Size: optional(o.SizeGiB), VolumeType: types.VolumeType(req.volType),
		Iops: optional(req.iops), Throughput: optional(o.Throughput), Encrypted: encrypted, KmsKeyId: kms,
		MultiAttachEnabled: multiAttach, TagSpecifications: tagSpec,
	}
	if o.SnapshotID != "" {
		in.SnapshotId = aws.String(o.SnapshotID)
	}
	if req.zone != "" {
		in.AvailabilityZone = aws.String(req.zone)
	} else {
		in.AvailabilityZoneId = aws.String(req.zoneID)
	}
	out, err := c.ec2.CreateVolume(ctx, in, c.retry.use(opCreateVolume))
	if err != nil {
		return nil, time.Time{}, classify(opCreateVolume, err)
	}
	return toVolume(types.Volume{
		VolumeId: out.VolumeId, Size: out.Size, VolumeType: out.VolumeType, Iops: out.Iops, Throughput: out.Throughput,
		Encrypted: out.Encrypted, KmsKeyId: out.KmsKeyId, AvailabilityZone: out.AvailabilityZone,
		AvailabilityZoneId: out.AvailabilityZoneId, SnapshotId: out.SnapshotId, SourceVolumeId: out.SourceVolumeId,
		MultiAttachEnabled: out.MultiAttachEnabled, State: out.State, Tags: out.Tags, CreateTime: out.CreateTime,
		Attachments: out.Attachments,
	}), sentAt(out.ResultMetadata, called), nil
}

// waitVolumeAvailable waits until the volume is available (in-use counts:
// it is still the volume asked for), from sent when this process sent the
// CreateVolume (zero when it found the volume being created; see
// waitTransition). A volume in "error", being deleted, or
// missing from DescribeVolumes VisibilityTimeout after since (when the
// request that returned it was answered, or it was last seen, by the
// controller's clock: never EC2's timestamps, whose clock may be off by
// minutes) is errVolumeLost; the last volume seen is returned with that
// error.
func (c *ec2Cloud) waitVolumeAvailable(ctx context.Context, id string, sent, since time.Time) (*Volume, error) {
	var vol *Volume
	err := c.waitVolume(ctx, transitionCreate, sent, id, func(v types.Volume, err error) (bool, string, error) {
		if errors.Is(err, ErrNotFound) {
			if waited := time.Since(since); waited > c.cfg.VisibilityTimeout {
				return false, "", fmt.Errorf("volume %s is not in DescribeVolumes %s after it was asked for: %w",
					id, waited.Round(time.Second), errVolumeLost)
			}
			return false, fmt.Sprintf("volume %s is not visible yet", id), nil
		}
		if err != nil {
			return false, "", err
		}
		vol = toVolume(v)
		switch {
		case vol.State == volumeAvailable || vol.State == volumeInUse:
			return true, "", nil
		case isGone(vol.State):
			return false, "", fmt.Errorf("volume %s is %s: %w", id, vol.State, errVolumeLost)
		default:
			return false, fmt.Sprintf("volume %s is %s", id, vol.State), nil
		}
	})
	return vol, err
}

// DeleteVolume deletes a volume. It does not wait: EC2 finishes deleting on
// its own, and a volume being deleted can no longer be attached.
func (c *ec2Cloud) DeleteVolume(ctx context.Context, volumeID string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	klog.V(2).InfoS("Deleting volume", "volumeID", volumeID)
	_, err := c.ec2.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: aws.String(volumeID)}, c.retry.use(opDeleteVolume))
	return classify(opDeleteVolume, err)
}

// GetVolume returns one volume by ID; concurrent lookups share a call
// (while EC2 throttles, those a grid tick apart too: see awaitLookupTick).
func (c *ec2Cloud) GetVolume(ctx context.Context, volumeID string) (*Volume, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.awaitLookupTick(ctx); err != nil {
		return nil, err
	}
	v, err := c.describeVolume(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	return toVolume(v), nil
}

// volumesNamed returns the volumes tagged with name that are not lost,
// oldest first.
func (c *ec2Cloud) volumesNamed(ctx context.Context, name string) ([]*Volume, error) {
	raw, err := c.lookups.volumesByName.Get(ctx, name)
	if err != nil {
		return nil, lookupError(opDescribeVolumes, fmt.Sprintf("volume named %q", name), err)
	}
	var vols []*Volume
	for _, v := range raw {
		if vol := toVolume(v); !isGone(vol.State) {
			vols = append(vols, vol)
		}
	}
	slices.SortFunc(vols, func(a, b *Volume) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return vols, nil
}

// ListVolumes returns one page of the account's volumes.
func (c *ec2Cloud) ListVolumes(ctx context.Context, opts ListOptions) (*VolumePage, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	in := &ec2.DescribeVolumesInput{}
	items, next, err := listPage(opts.NextToken, opts.MaxResults, describeVolumesPageMax,
		func(token *string, size *int32) ([]types.Volume, *string, error) {
			in.NextToken, in.MaxResults = token, size
			out, err := c.ec2.DescribeVolumes(ctx, in, c.retry.use(opDescribeVolumes))
			if err != nil {
				return nil, nil, classify(opDescribeVolumes, err)
			}
			return out.Volumes, out.NextToken, nil
		})
	if err != nil {
		return nil, err
	}
	page := &VolumePage{NextToken: next}
	for _, v := range items {
		page.Volumes = append(page.Volumes, toVolume(v))
	}
	return page, nil
}
