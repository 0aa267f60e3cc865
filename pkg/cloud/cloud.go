// Package cloud is everything Diskplane's controller asks of an EC2-compatible
// cloud: volumes, attachments, snapshots, tags, zones and instances. The
// Cloud interface speaks in the driver's terms (sizes in GiB, volume types,
// sentinel errors); no SDK type or AWS error code crosses it, so the driver
// layer can be read, and tested, without knowing the EC2 API.
package cloud

import (
	"context"
	"time"
)

// Tag keys the cloud layer owns: they make CreateVolume and CreateSnapshot
// idempotent by name and let a restarted controller find its resources again.
const (
	// TagVolumeName holds the CSI volume name (the PV name) a volume was created for.
	TagVolumeName = "CSIVolumeName"
	// TagSnapshotName holds the CSI snapshot name a snapshot was created for.
	TagSnapshotName = "CSIVolumeSnapshotName"
)

// VolumeType is an EBS volume type.
type VolumeType string

// The EBS volume types Diskplane provisions.
const (
	VolumeTypeGP2      VolumeType = "gp2"
	VolumeTypeGP3      VolumeType = "gp3"
	VolumeTypeIO1      VolumeType = "io1"
	VolumeTypeIO2      VolumeType = "io2"
	VolumeTypeST1      VolumeType = "st1"
	VolumeTypeSC1      VolumeType = "sc1"
	VolumeTypeStandard VolumeType = "standard"
)

// Cloud is the controller's view of the cloud. Every method honours the
// caller's context deadline (it bounds retries and waits) and returns errors
// that wrap one of the sentinel errors in errors.go, keeping the cloud's own
// message.
type Cloud interface {
	// CreateVolume creates a volume for the CSI volume name and waits until it
	// is available. A retry with the same name returns the same volume (the
	// EC2 ClientToken is derived from the name), never a second one.
	CreateVolume(ctx context.Context, name string, opts *CreateVolumeOptions) (*Volume, error)
	// DeleteVolume deletes a volume; a volume that does not exist is ErrNotFound.
	DeleteVolume(ctx context.Context, volumeID string) error
	// GetVolume returns one volume by ID (batched with concurrent lookups).
	GetVolume(ctx context.Context, volumeID string) (*Volume, error)
	// ListVolumes returns one page of volumes.
	ListVolumes(ctx context.Context, opts ListOptions) (*VolumePage, error)
	// VolumeStatuses returns EC2's status checks, events and initialization
	// progress of volumes (DescribeVolumeStatus), batched with concurrent
	// lookups so that a page of volumes costs one call, not one per volume.
	// A volume the cloud does not know is missing from the answer.
	VolumeStatuses(ctx context.Context, volumeIDs []string) (map[string]*VolumeStatus, error)
	// ModifyVolume changes size, type, IOPS or throughput and waits until the
	// modification is optimizing or completed. The size is a minimum: asking
	// for what the volume already is, or is becoming, does nothing; a
	// modification in progress is awaited, not issued again.
	ModifyVolume(ctx context.Context, volumeID string, mod VolumeModification) (*Volume, error)

	// AttachVolume attaches a volume to an instance, waits until attached and
	// returns the device name (e.g. /dev/xvdaa). Attaching a volume that is
	// already attached to that instance returns its device. A volume attached
	// to another instance is ErrAttachedElsewhere, unless it is multi-attach
	// and opts.Shared is set.
	AttachVolume(ctx context.Context, volumeID, instanceID string, opts AttachOptions) (devicePath string, err error)
	// DetachVolume detaches a volume from an instance and waits until it is
	// detached. A volume or instance that no longer exists, or a volume not
	// attached to that instance, is ErrNotFound.
	DetachVolume(ctx context.Context, volumeID, instanceID string) error

	// CreateSnapshot snapshots a volume for the CSI snapshot name. A retry
	// with the same name and source returns the same snapshot; the same name
	// for another source volume is ErrAlreadyExists. It does not wait for
	// completion (Snapshot.Ready says whether it is usable).
	CreateSnapshot(ctx context.Context, name, sourceVolumeID string, opts *CreateSnapshotOptions) (*Snapshot, error)
	// DeleteSnapshot deletes a snapshot; one that does not exist is ErrNotFound.
	DeleteSnapshot(ctx context.Context, snapshotID string) error
	// GetSnapshot returns one snapshot by ID.
	GetSnapshot(ctx context.Context, snapshotID string) (*Snapshot, error)
	// GetSnapshotByName returns the snapshot tagged with the CSI snapshot name.
	GetSnapshotByName(ctx context.Context, name string) (*Snapshot, error)
	// ListSnapshots returns one page of snapshots, all or of one source volume.
	ListSnapshots(ctx context.Context, opts SnapshotListOptions) (*SnapshotPage, error)
	// WaitForSnapshot waits until a snapshot is completed (or failed).
	WaitForSnapshot(ctx context.Context, snapshotID string) (*Snapshot, error)

	// UpdateTags sets and removes tags on a volume or snapshot.
	UpdateTags(ctx context.Context, resourceID string, set map[string]string, remove []string) error

	// AvailabilityZones lists the region's zones that are available.
	AvailabilityZones(ctx context.Context) ([]Zone, error)
	// GetInstance returns an instance's type, zone and attachments.
	GetInstance(ctx context.Context, instanceID string) (*Instance, error)
	// HealthCheck reports whether the cloud API answers with valid
	// credentials. It is cheap enough for a liveness probe (results may be cached).
	HealthCheck(ctx context.Context) error

	// Close releases what the Cloud runs in the background (the Describe
	// batchers); calls made after Close fail with ErrUnavailable.
	Close()
}

// CreateVolumeOptions describes a new volume. Zero values mean "the cloud's default".
type CreateVolumeOptions struct {
	// SizeGiB is the capacity in GiB.
	SizeGiB int32
	// Type is the volume type; empty means gp3.
	Type VolumeType
	// IOPS is the provisioned IOPS (gp3, io1, io2); zero means the type's default.
	IOPS int32
	// IOPSPerGiB asks for IOPS proportional to size (io1, io2, gp3); mutually exclusive with IOPS.
	IOPSPerGiB int32
	// AllowIOPSPerGiBIncrease raises IOPS computed from IOPSPerGiB to the
	// type's minimum instead of failing.
	AllowIOPSPerGiBIncrease bool
	// Throughput is the provisioned throughput in MiB/s (gp3).
	Throughput int32
	// Encrypted asks for an encrypted volume.
	Encrypted bool
	// KMSKeyID is the KMS key for encryption; setting it implies Encrypted.
	KMSKeyID string
	// Zone is the availability zone name; ZoneID the zone ID. At most one is
	// set; with neither, the cloud picks an available zone.
	Zone   string
	ZoneID string
	// SnapshotID restores the volume from a snapshot.
	SnapshotID string
	// SourceVolumeID clones another volume (EC2 CopyVolumes); it must be in the same zone.
	SourceVolumeID string
	// MultiAttach enables attaching the volume to several instances (io2 only).
	MultiAttach bool
	// Tags are set on the volume at creation, besides the name tag.
	Tags map[string]string
	// Mismatch, when set, says how a live volume already carrying the name
	// fails the caller's request, or "" when it serves it; it replaces the
	// cloud layer's own comparison with these options (size, type, zone,
	// IOPS, throughput, encryption, source and multi-attach must be equal).
	// The CSI layer judges by the request's capacity range and topology,
	// which these options do not carry, so the name is looked up once per
	// request, here.
	Mismatch func(*Volume) string
}

// AttachOptions says how a volume may be attached.
type AttachOptions struct {
	// Shared lets a multi-attach volume be attached to an instance while it
	// is attached to others: multi-node access. Without it a volume is
	// served to one instance at a time, multi-attach or not.
	Shared bool
	// Read is the volume as the caller read it (GetVolume) while serving
	// this request. AttachVolume decides from it instead of reading the
	// volume again, which saves a DescribeVolumes per attach; nil (or
	// another volume's record) makes AttachVolume read the volume itself.
	Read *Volume
}

// VolumeModification is a change to a volume; zero fields stay as they are.
type VolumeModification struct {
	SizeGiB    int32
	Type       VolumeType
	IOPS       int32
	Throughput int32
}

// IsEmpty reports whether the modification changes nothing.
func (m VolumeModification) IsEmpty() bool {
	return m == VolumeModification{}
}

// Volume is a block volume as the cloud reports it.
type Volume struct {
	ID             string
	Name           string // the TagVolumeName tag, when set
	SizeGiB        int32
	Type           VolumeType
	IOPS           int32
	Throughput     int32
	Encrypted      bool
	KMSKeyID       string
	Zone           string
	ZoneID         string
	SnapshotID     string
	SourceVolumeID string
	MultiAttach    bool
	// State is the cloud's volume state: creating, available, in-use, deleting, deleted or error.
	State       string
	Attachments []Attachment
	Tags        map[string]string
	CreatedAt   time.Time
}

// Attachment is one attachment of a volume to an instance.
type Attachment struct {
	InstanceID string
	DevicePath string
	// State is AttachmentAttaching, AttachmentAttached,
	// AttachmentDetaching, AttachmentDetached or AttachmentBusy.
	State string
	// DeleteOnTermination is set for volumes the instance was launched
	// with (its root volume among them); never for attachments Diskplane makes.
	DeleteOnTermination bool
}

// Snapshot is a point-in-time copy of a volume.
type Snapshot struct {
	ID             string
	Name           string // the TagSnapshotName tag, when set
	SourceVolumeID string
	SizeGiB        int32
	// State is pending, completed, error (or recovering / recoverable).
	State string
	// Ready is true once the snapshot can be restored from.
	Ready bool
	// StateMessage is EC2's reason for a snapshot in "error".
	StateMessage string
	Tags         map[string]string
	CreatedAt    time.Time
}

// CreateSnapshotOptions describes a new snapshot.
type CreateSnapshotOptions struct {
	// Tags are set on the snapshot at creation, besides the name tag.
	Tags map[string]string
	// Intent, when set, records this process as one that may send
	// CreateSnapshot for the name before anything is sent, and tells whether
	// another process did so first. Without it, nothing tells whether a
	// previous process sent a request for the name, so a lookup that finds
	// no snapshot is trusted only VisibilityTimeout after this process
	// started.
	Intent SnapshotIntent
}

// SnapshotIntent is the record, kept where every controller process reads
// it with strong consistency (EC2's reads are eventually consistent, tags
// included), of which processes may have sent CreateSnapshot for one
// snapshot name. CreateSnapshot has no ClientToken: a process that may send
// one records itself first, so that a successor which finds no earlier
// record knows that no predecessor sent anything, and trusts a lookup that
// finds no snapshot at once instead of waiting out EC2's visibility window
// after its start.
type SnapshotIntent interface {
	// Record marks this process as one that may send CreateSnapshot for the
	// name, and reports whether another process had marked itself before
	// (it may have sent a request whose snapshot EC2's reads do not show
	// yet). An error means nothing may be sent.
	Record(ctx context.Context) (othersBefore bool, err error)
}

// ListOptions selects one page of volumes.
type ListOptions struct {
	// MaxResults bounds the page size; zero means the cloud's default.
	MaxResults int32
	// NextToken continues a previous page; empty starts from the beginning.
	NextToken string
}

// SnapshotListOptions selects one page of snapshots.
type SnapshotListOptions struct {
	// SourceVolumeID, when set, lists only snapshots of that volume.
	SourceVolumeID string
	MaxResults     int32
	NextToken      string
	// TagKey, when set, lists only snapshots that carry this tag key.
	TagKey string
}

// VolumePage is one page of ListVolumes.
type VolumePage struct {
	Volumes   []*Volume
	NextToken string
}

// SnapshotPage is one page of ListSnapshots.
type SnapshotPage struct {
	Snapshots []*Snapshot
	NextToken string
}

// Zone is an availability zone.
type Zone struct {
	Name string
	ID   string
}

// Instance is a compute instance volumes attach to.
type Instance struct {
	ID     string
	Type   string
	Zone   string
	ZoneID string
	// DeviceNames are the device names in use on the instance (from its block device mappings).
	DeviceNames []string
	// AttachedVolumes is the number of EBS volumes attached, the root volume included.
	AttachedVolumes int
	// State is EC2's instance state (InstanceRunning, InstanceStopped …).
	State string
	// StateTransitionReason is EC2's account of why and when the instance
	// last left running, e.g. "User initiated (2026-11-29 10:00:00 GMT)";
	// empty while it runs as launched.
	StateTransitionReason string
}

// EC2's attachment states. Busy is a detach that waits for the guest to
// release the device.
const (
	AttachmentAttaching = "attaching"
	AttachmentAttached  = "attached"
	AttachmentDetaching = "detaching"
	AttachmentDetached  = "detached"
	AttachmentBusy      = "busy"
)

// EC2's instance states.
const (
	InstancePending      = "pending"
	InstanceRunning      = "running"
	InstanceShuttingDown = "shutting-down"
	InstanceTerminated   = "terminated"
	InstanceStopping     = "stopping"
	InstanceStopped      = "stopped"
)
