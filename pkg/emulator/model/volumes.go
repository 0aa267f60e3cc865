package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"time"

	"k8s.io/klog/v2"
)

// CreateVolumeInput is a CreateVolume request. Pointers and empty strings
// mean the parameter was not given.
type CreateVolumeInput struct {
	Zone        string            `json:"zone,omitempty"`
	ZoneID      string            `json:"zoneId,omitempty"`
	Size        int32             `json:"size,omitempty"`
	Type        string            `json:"type,omitempty"`
	Iops        *int32            `json:"iops,omitempty"`
	Throughput  *int32            `json:"throughput,omitempty"`
	Encrypted   *bool             `json:"encrypted,omitempty"`
	KmsKeyID    string            `json:"kmsKeyId,omitempty"`
	MultiAttach *bool             `json:"multiAttach,omitempty"`
	SnapshotID  string            `json:"snapshotId,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	ClientToken string            `json:"-"`
	DryRun      bool              `json:"-"`
}

// CreateVolume creates a volume in "creating" state; it becomes available
// after the VolumeCreate latency. A repeated ClientToken with the same
// parameters returns the volume the first request made.
func (c *Cloud) CreateVolume(in CreateVolumeInput) (Volume, error) {
	var out Volume
	err := c.do(func(now time.Time) error {
		if prev, e := c.replayToken("CreateVolume", in.ClientToken, in, now); e != nil || prev != nil {
			if prev != nil {
				out = prev[0]
			}
			return asError(e)
		}
		v, e := c.newVolume(in, now)
		if e != nil {
			return e
		}
		if e := c.checkStorageQuota(v.Type, v.Size, ""); e != nil {
			return e
		}
		if in.DryRun {
			return dryRunError()
		}
		v.Due = c.latency.due(transitionVolumeCreate, v.ID, now)
		if err := c.createBytes(v); err != nil {
			return err
		}
		v.Failing = c.cfg.FailAsync != nil && c.cfg.FailAsync("CreateVolume", v.KmsKeyID)
		c.st.Volumes[v.ID] = v
		out = cloneVolume(v)
		c.rememberToken("CreateVolume", in.ClientToken, in, []Volume{out}, now)
		c.markDirty()
		klog.V(2).InfoS("Volume created", "volumeID", v.ID, "zone", v.Zone, "size", v.Size, "type", v.Type, "snapshotID", v.SnapshotID)
		return nil
	})
	return out, err
}

// newVolume validates a CreateVolume request and builds the volume (its
// creation not yet timed: see latencyDraws.due).
func (c *Cloud) newVolume(in CreateVolumeInput, now time.Time) (*Volume, *Error) {
	zone, err := c.requestZone(in.Zone, in.ZoneID)
	if err != nil {
		return nil, err
	}
	req := requestedSettings{Type: in.Type, Size: in.Size, Iops: in.Iops, Throughput: in.Throughput, MultiAttach: in.MultiAttach}
	if req.Type == "" {
		req.Type = DefaultVolumeType
	}
	var snap *Snapshot
	if in.SnapshotID != "" {
		if snap, err = c.snapshotByID(in.SnapshotID); err != nil {
			return nil, err
		}
		if snap.State != SnapshotCompleted {
			return nil, Errorf(CodeIncorrectState, "Snapshot '%s' is not in the 'completed' state.", snap.ID)
		}
		if req.Size == 0 {
			req.Size = snap.VolumeSize
		} else if req.Size < snap.VolumeSize {
			return nil, Errorf(CodeInvalidParameterValue, "Volume of size %dGB is smaller than snapshot '%s', expect size >= %dGB", req.Size, snap.ID, snap.VolumeSize)
		}
	} else if req.Size == 0 {
		return nil, Errorf(CodeMissingParameter, "The request must contain the parameter size or snapshotId")
	}
	settings, err := createSettings(req)
	if err != nil {
		return nil, err
	}
	encrypted := in.Encrypted != nil && *in.Encrypted
	if in.KmsKeyID != "" && !encrypted {
		return nil, Errorf(CodeInvalidParameterDependency, "The parameter KmsKeyId requires the parameter Encrypted to be set.")
	}
	kms := in.KmsKeyID
	if snap != nil && snap.Encrypted {
		encrypted = true
		if kms == "" {
			kms = snap.KmsKeyID
		}
	}
	if encrypted && kms == "" {
		kms = c.defaultKmsKey()
	}
	if err := checkTags(in.Tags); err != nil {
		return nil, err
	}
	v := &Volume{
		ID:          newID("vol"),
		Zone:        zone.Name,
		Size:        settings.Size,
		Type:        settings.Type,
		Iops:        settings.Iops,
		Throughput:  settings.Throughput,
		MultiAttach: settings.MultiAttach,
		Encrypted:   encrypted,
		KmsKeyID:    kms,
		SnapshotID:  in.SnapshotID,
		CreateTime:  now.UTC(),
		State:       VolumeCreating,
		Tags:        maps.Clone(in.Tags),
	}
	return v, nil
}

// createBytes makes the volume's bytes in the store: empty, restored from
// its snapshot or copied from its source volume.
func (c *Cloud) createBytes(v *Volume) error {
	size := int64(v.Size) * gib
	var err error
	switch {
	case v.SnapshotID != "":
		err = c.cfg.Store.CreateVolumeFromSnapshot(v.ID, v.SnapshotID, size)
	case v.SourceVolumeID != "":
		err = c.cfg.Store.CloneVolume(v.ID, v.SourceVolumeID, size)
	default:
		err = c.cfg.Store.CreateVolume(v.ID, size)
	}
	if err != nil {
		return fmt.Errorf("disk store: create volume %s: %w", v.ID, err)
	}
	return nil
}

// requestZone resolves a request's AvailabilityZone / AvailabilityZoneId.
func (c *Cloud) requestZone(name, id string) (Zone, *Error) {
	switch {
	case name != "" && id != "":
		return Zone{}, Errorf(CodeInvalidParameterCombination, "Only one of AvailabilityZone or AvailabilityZoneId can be specified.")
	case name != "":
		if z, ok := findZone(c.cfg.Zones, name); ok {
			return z, nil
		}
		return Zone{}, Errorf(CodeInvalidZoneNotFound, "The zone '%s' does not exist.", name)
	case id != "":
		for _, z := range c.cfg.Zones {
			if z.ID == id {
				return z, nil
			}
		}
		return Zone{}, Errorf(CodeInvalidZoneNotFound, "The zone ID '%s' does not exist.", id)
	default:
		return Zone{}, Errorf(CodeMissingParameter, "The request must contain the parameter AvailabilityZone or AvailabilityZoneId")
	}
}

// defaultKmsKey is the account's default EBS encryption key (aws/ebs).
func (c *Cloud) defaultKmsKey() string {
	return fmt.Sprintf("arn:aws:kms:%s:%s:key/0e5c9d3e-6f0a-4b8e-9c1d-ebs000000001", c.cfg.Region, c.cfg.AccountID)
}

// CopyVolumesInput is a CopyVolumes request.
type CopyVolumesInput struct {
	SourceVolumeID string            `json:"sourceVolumeId"`
	Size           int32             `json:"size,omitempty"`
	Type           string            `json:"type,omitempty"`
	Iops           *int32            `json:"iops,omitempty"`
	Throughput     *int32            `json:"throughput,omitempty"`
	Encrypted      *bool             `json:"encrypted,omitempty"`
	KmsKeyID       string            `json:"kmsKeyId,omitempty"`
	MultiAttach    *bool             `json:"multiAttach,omitempty"`
	Tags           map[string]string `json:"tags,omitempty"`
	ClientToken    string            `json:"-"`
	DryRun         bool              `json:"-"`
}

// CopyVolumes makes a crash-consistent, point-in-time copy of a volume in
// its zone. The copy's bytes are taken at the request, so writes after it do
// not show in the copy.
func (c *Cloud) CopyVolumes(in CopyVolumesInput) ([]Volume, error) {
	var out []Volume
	err := c.do(func(now time.Time) error {
		if prev, e := c.replayToken("CopyVolumes", in.ClientToken, in, now); e != nil || prev != nil {
			out = prev
			return asError(e)
		}
		src, e := c.volumeByID(in.SourceVolumeID, 0, now)
		if e != nil {
			return e
		}
		if src.State != VolumeAvailable && src.State != VolumeInUse {
			return Errorf(CodeIncorrectState, "Volume '%s' is in the '%s' state.", src.ID, src.State)
		}
		req := requestedSettings{Type: in.Type, Size: in.Size, Iops: in.Iops, Throughput: in.Throughput, MultiAttach: in.MultiAttach}
		if req.Type == "" {
			req.Type = DefaultVolumeType
		}
		if req.Size == 0 {
			req.Size = src.Size
		} else if req.Size < src.Size {
			return Errorf(CodeInvalidParameterValue, "The size of the volume copy (%d GiB) must be at least the size of the source volume (%d GiB).", req.Size, src.Size)
		}
		settings, e := createSettings(req)
		if e != nil {
			return e
		}
		encrypted := src.Encrypted || (in.Encrypted != nil && *in.Encrypted)
		if in.KmsKeyID != "" && !encrypted {
			return Errorf(CodeInvalidParameterDependency, "The parameter KmsKeyId requires the parameter Encrypted to be set.")
		}
		kms := in.KmsKeyID
		if kms == "" && src.Encrypted {
			kms = src.KmsKeyID
		}
		if kms == "" && encrypted {
			kms = c.defaultKmsKey()
		}
		if e := checkTags(in.Tags); e != nil {
			return e
		}
		if e := c.checkStorageQuota(settings.Type, settings.Size, ""); e != nil {
			return e
		}
		if in.DryRun {
			return dryRunError()
		}
		id := newID("vol")
		v := &Volume{
			ID: id, Zone: src.Zone, Size: settings.Size, Type: settings.Type, Iops: settings.Iops,
			Throughput: settings.Throughput, MultiAttach: settings.MultiAttach, Encrypted: encrypted, KmsKeyID: kms,
			SourceVolumeID: src.ID, CreateTime: now.UTC(), State: VolumeCreating, Tags: maps.Clone(in.Tags),
			Due: c.latency.due(transitionVolumeCreate, id, now),
		}
		if err := c.createBytes(v); err != nil {
			return err
		}
		v.Failing = c.cfg.FailAsync != nil && c.cfg.FailAsync("CopyVolumes", v.KmsKeyID)
		c.st.Volumes[v.ID] = v
		out = []Volume{cloneVolume(v)}
		c.rememberToken("CopyVolumes", in.ClientToken, in, out, now)
		c.markDirty()
		klog.V(2).InfoS("Volume copied", "volumeID", v.ID, "sourceVolumeID", src.ID, "size", v.Size, "type", v.Type)
		return nil
	})
	return out, err
}

// replayToken answers a request whose ClientToken was seen before (within
// ClientTokenTTL): the volumes it made, as they are now. The same token
// with other parameters, or once a volume it made is gone, answers
// IdempotentParameterMismatch, as EC2 does. Both results are nil for a new
// token.
func (c *Cloud) replayToken(action, token string, req any, now time.Time) ([]Volume, *Error) {
	if token == "" {
		return nil, nil
	}
	if len(token) > 64 {
		return nil, Errorf(CodeInvalidParameterValue, "The client token must be 64 characters or fewer.")
	}
	rec := c.st.Tokens[token]
	if rec == nil || c.tokenExpired(rec, now) {
		return nil, nil
	}
	mismatch := Errorf(CodeIdempotentParameterMismatch, "The client token you have provided is associated with a resource that is already deleted or was created with different parameters. Please use a different client token.")
	body, _ := json.Marshal(req)
	if rec.Action != action || rec.Request != string(body) {
		return nil, mismatch
	}
	out := make([]Volume, len(rec.VolumeIDs))
	for i, id := range rec.VolumeIDs {
		v := c.st.Volumes[id]
		if v == nil {
			return nil, mismatch
		}
		out[i] = cloneVolume(v)
	}
	return out, nil
}

// tokenExpired reports whether a token is older than ClientTokenTTL. A
// token saved before tokens had a time counts from now.
func (c *Cloud) tokenExpired(rec *clientToken, now time.Time) bool {
	if rec.Created.IsZero() {
		rec.Created = now.UTC()
		c.markDirty()
	}
	return now.Sub(rec.Created) >= c.cfg.ClientTokenTTL
}

// tokenPruneInterval is how often remembering a token also forgets the
// expired ones, so the saved state does not grow without bound.
const tokenPruneInterval = time.Minute

// rememberToken records an idempotent request and what it made.
func (c *Cloud) rememberToken(action, token string, req any, made []Volume, now time.Time) {
	if token == "" {
		return
	}
	if now.Sub(c.tokensPruned) >= tokenPruneInterval {
		for t, rec := range c.st.Tokens {
			if c.tokenExpired(rec, now) {
				delete(c.st.Tokens, t)
			}
		}
		c.tokensPruned = now
	}
	body, _ := json.Marshal(req)
	ids := make([]string, len(made))
	for i, v := range made {
		ids[i] = v.ID
	}
	c.st.Tokens[token] = &clientToken{Action: action, Request: string(body), VolumeIDs: ids, Created: now.UTC()}
}

// asError converts a possibly nil *Error into an error without the typed-nil
// trap.
func asError(e *Error) error {
	if e == nil {
		return nil
	}
	return e
}

// DeleteVolume starts deleting an available volume; it is gone after the
// VolumeDelete latency. Deleting a volume that is already being deleted
// succeeds.
func (c *Cloud) DeleteVolume(id string, dryRun bool) error {
	return c.do(func(now time.Time) error {
		v, e := c.volumeByID(id, 0, now)
		if e != nil {
			return e
		}
		switch v.State {
		case VolumeInUse:
			return Errorf(CodeVolumeInUse, "Volume %s is currently attached to %s", v.ID, v.Attachments[0].InstanceID)
		case VolumeCreating:
			return Errorf(CodeIncorrectState, "The volume '%s' is in the 'creating' state.", v.ID)
		}
		if dryRun {
			return dryRunError()
		}
		if v.State == VolumeDeleting {
			return nil
		}
		v.State = VolumeDeleting
		v.Due = c.latency.due(transitionVolumeDelete, v.ID, now)
		c.markDirty()
		klog.V(2).InfoS("Volume deleting", "volumeID", v.ID)
		return nil
	})
}

// volumeByID finds a volume for a request naming it, with EC2's errors for a
// malformed or unknown ID. hide applies the eventual-consistency fault.
func (c *Cloud) volumeByID(id string, hide time.Duration, now time.Time) (*Volume, *Error) {
	return c.currentWorld().volume(id, hide, now)
}

// volume finds a volume of a world by ID, as volumeByID does.
func (w world) volume(id string, hide time.Duration, now time.Time) (*Volume, *Error) {
	if e := checkVolumeID(id); e != nil {
		return nil, e
	}
	v := w.volumes[id]
	if v == nil || !visible(v.CreateTime, now, hide) {
		return nil, volumeNotFound(id)
	}
	return v, nil
}

// volumePaging are DescribeVolumes' MaxResults bounds.
var volumePaging = pageRules{param: "volumeSet", min: 5, max: 500}

// DescribeVolumes lists volumes by ID and filters, a page at a time.
func (c *Cloud) DescribeVolumes(q Query) (Page[Volume], error) {
	var page Page[Volume]
	err := c.do(func(now time.Time) error {
		size, e := checkPaging(q, volumePaging)
		if e != nil {
			return e
		}
		items, e := c.selectVolumes(q, now)
		if e != nil {
			return e
		}
		page, e = paginate(items, func(v Volume) string { return v.ID }, q, size)
		return asError(e)
	})
	return page, err
}

// selectVolumes applies a query's IDs, visibility, lag and filters.
func (c *Cloud) selectVolumes(q Query, now time.Time) ([]Volume, *Error) {
	w := c.readWorld(now, q.Lag)
	var items []Volume
	if len(q.IDs) > 0 {
		var missing []string
		for _, id := range dedupe(q.IDs) {
			v, e := w.volume(id, q.Hide, now)
			if e != nil && e.Code != CodeInvalidVolumeNotFound {
				return nil, e
			}
			if v == nil {
				missing = append(missing, id)
				continue
			}
			items = append(items, cloneVolume(v))
		}
		if len(missing) > 0 {
			return nil, volumeNotFound(missing...)
		}
	} else {
		for _, v := range w.volumes {
			if visible(v.CreateTime, now, q.Hide) {
				items = append(items, cloneVolume(v))
			}
		}
	}
	return filterItems(items, q.Filters, c.volumeField, func(v Volume) map[string]string { return v.Tags })
}

// volumeField answers the DescribeVolumes filters.
func (c *Cloud) volumeField(v Volume, name string) ([]string, bool) {
	attach := func(f func(a *Attachment) string) []string {
		var out []string
		for _, a := range v.Attachments {
			out = append(out, f(a))
		}
		return out
	}
	switch name {
	case "volume-id":
		return []string{v.ID}, true
	case "status":
		return []string{string(v.State)}, true
	case "availability-zone":
		return []string{v.Zone}, true
	case "availability-zone-id":
		z, _ := findZone(c.cfg.Zones, v.Zone)
		return []string{z.ID}, true
	case "size":
		return []string{strconv.Itoa(int(v.Size))}, true
	case "snapshot-id":
		return []string{v.SnapshotID}, true
	case "volume-type":
		return []string{v.Type}, true
	case "encrypted":
		return []string{boolString(v.Encrypted)}, true
	case "multi-attach-enabled":
		return []string{boolString(v.MultiAttach)}, true
	case "create-time":
		return []string{v.CreateTime.UTC().Format(TimeFormat)}, true
	case "attachment.instance-id":
		return attach(func(a *Attachment) string { return a.InstanceID }), true
	case "attachment.status":
		return attach(func(a *Attachment) string { return string(a.State) }), true
	case "attachment.device":
		return attach(func(a *Attachment) string { return a.Device }), true
	case "attachment.delete-on-termination":
		return attach(func(a *Attachment) string { return boolString(a.DeleteOnTermination) }), true
	case "attachment.attach-time":
		return attach(func(a *Attachment) string { return a.AttachTime.UTC().Format(TimeFormat) }), true
	}
	return nil, false
}

// TimeFormat is how EC2 writes timestamps (ISO 8601, milliseconds, UTC).
const TimeFormat = "2006-01-02T15:04:05.000Z"

// dedupe drops repeated IDs, keeping the first occurrence.
func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Volumes returns every volume, for the admin view and tests.
func (c *Cloud) Volumes() []Volume {
	var out []Volume
	_ = c.do(func(time.Time) error {
		for _, v := range c.st.Volumes {
			out = append(out, cloneVolume(v))
		}
		return nil
	})
	sortByID(out, func(v Volume) string { return v.ID })
	return out
}
