package model

import (
	"maps"
	"slices"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
)

// VolumeState is a volume's lifecycle state as DescribeVolumes reports it.
type VolumeState string

// The volume states EC2 reports.
const (
	VolumeCreating  VolumeState = "creating"
	VolumeAvailable VolumeState = "available"
	VolumeInUse     VolumeState = "in-use"
	VolumeDeleting  VolumeState = "deleting"
	VolumeError     VolumeState = "error"
)

// AttachmentState is the state of one volume-to-instance attachment.
type AttachmentState string

// The attachment states EC2 reports.
const (
	AttachmentAttaching AttachmentState = "attaching"
	AttachmentAttached  AttachmentState = "attached"
	AttachmentDetaching AttachmentState = "detaching"
	AttachmentDetached  AttachmentState = "detached"
)

// SnapshotState is a snapshot's state as DescribeSnapshots reports it.
type SnapshotState string

// The snapshot states EC2 reports.
const (
	SnapshotPending   SnapshotState = "pending"
	SnapshotCompleted SnapshotState = "completed"
	SnapshotError     SnapshotState = "error"
)

// ModificationState is the state of a volume modification.
type ModificationState string

// The modification states EC2 reports.
const (
	ModificationModifying  ModificationState = "modifying"
	ModificationOptimizing ModificationState = "optimizing"
	ModificationCompleted  ModificationState = "completed"
	ModificationFailed     ModificationState = "failed"
)

// Volume is one EBS volume. The model hands out copies, so a caller may keep
// or change what it gets without touching the cloud's state.
type Volume struct {
	ID             string            `json:"id"`
	Zone           string            `json:"zone"`
	Size           int32             `json:"size"`
	Type           string            `json:"type"`
	Iops           int32             `json:"iops,omitempty"`
	Throughput     int32             `json:"throughput,omitempty"`
	Encrypted      bool              `json:"encrypted,omitempty"`
	KmsKeyID       string            `json:"kmsKeyId,omitempty"`
	MultiAttach    bool              `json:"multiAttach,omitempty"`
	SnapshotID     string            `json:"snapshotId,omitempty"`
	SourceVolumeID string            `json:"sourceVolumeId,omitempty"`
	CreateTime     time.Time         `json:"createTime"`
	State          VolumeState       `json:"state"`
	Tags           map[string]string `json:"tags,omitempty"`
	Attachments    []*Attachment     `json:"attachments,omitempty"`
	// Due is when the current transitional state (creating, deleting) ends.
	Due time.Time `json:"due,omitzero"`
	// Root marks an instance's boot volume: it counts against the instance's
	// attachment limit but is never exposed through the disk store, because
	// the host already has its own root disk.
	Root bool `json:"root,omitempty"`
	// Health is what DescribeVolumeStatus reports (health.go).
	Health VolumeHealth `json:"health,omitzero"`
	// Failing makes the volume go to "error" instead of "available" when it
	// is created, and disappear a while later (an asynchronous failure:
	// an unusable KMS key, or the fault).
	Failing bool `json:"failing,omitempty"`
}

// Attachment is a volume attached (or being attached) to an instance.
type Attachment struct {
	VolumeID            string          `json:"volumeId"`
	InstanceID          string          `json:"instanceId"`
	Device              string          `json:"device"`
	State               AttachmentState `json:"state"`
	AttachTime          time.Time       `json:"attachTime"`
	DeleteOnTermination bool            `json:"deleteOnTermination,omitempty"`
	// Due is when attaching or detaching may complete.
	Due time.Time `json:"due,omitzero"`
	// Stuck keeps the attachment in "attaching" until it is detached or the
	// fault is released (the stuck-attach fault).
	Stuck bool `json:"stuck,omitempty"`
	// Force records a forced detach, which does not wait for a busy device.
	Force bool `json:"force,omitempty"`
	// HostDevice is the loop device backing the attachment on this host, for
	// the admin view; EC2 itself never reports it.
	HostDevice string `json:"hostDevice,omitempty"`
}

// Snapshot is one EBS snapshot.
type Snapshot struct {
	ID          string            `json:"id"`
	VolumeID    string            `json:"volumeId"`
	VolumeSize  int32             `json:"volumeSize"`
	State       SnapshotState     `json:"state"`
	Progress    int               `json:"progress"`
	StartTime   time.Time         `json:"startTime"`
	Completion  time.Time         `json:"completionTime,omitzero"`
	Description string            `json:"description,omitempty"`
	Encrypted   bool              `json:"encrypted,omitempty"`
	KmsKeyID    string            `json:"kmsKeyId,omitempty"`
	OwnerID     string            `json:"ownerId"`
	Tags        map[string]string `json:"tags,omitempty"`
	// Due is when a pending snapshot completes (or fails).
	Due time.Time `json:"due,omitzero"`
	// Failing makes the pending snapshot go to "error" instead of
	// "completed" (an asynchronous failure fault); StateMessage says why.
	Failing      bool   `json:"failing,omitempty"`
	StateMessage string `json:"stateMessage,omitempty"`
}

// VolumeSettings are the parameters a modification changes.
type VolumeSettings struct {
	Size        int32  `json:"size"`
	Type        string `json:"type"`
	Iops        int32  `json:"iops,omitempty"`
	Throughput  int32  `json:"throughput,omitempty"`
	MultiAttach bool   `json:"multiAttach,omitempty"`
}

// Modification is the latest modification of a volume (EC2 reports only the
// latest per volume).
type Modification struct {
	VolumeID  string            `json:"volumeId"`
	State     ModificationState `json:"state"`
	Original  VolumeSettings    `json:"original"`
	Target    VolumeSettings    `json:"target"`
	Progress  int               `json:"progress"`
	StartTime time.Time         `json:"startTime"`
	EndTime   time.Time         `json:"endTime,omitzero"`
	// Due is when the current state (modifying or optimizing) ends.
	Due time.Time `json:"due,omitzero"`
	// PhaseStart is when optimizing began, which optimizing's progress
	// counts from.
	PhaseStart time.Time `json:"phaseStart,omitzero"`
}

// NetworkInterface is one ENI of an instance. On instance types whose
// attachment slots are shared, every interface takes one.
type NetworkInterface struct {
	ID           string   `json:"id"`
	MAC          string   `json:"mac"`
	DeviceNumber int      `json:"deviceNumber"`
	PrivateIPs   []string `json:"privateIps"`
	SubnetID     string   `json:"subnetId"`
	VPCID        string   `json:"vpcId"`
}

// Instance is one EC2 instance the emulated cloud knows. Instances are
// declared by configuration, never launched through the API.
type Instance struct {
	ID                string             `json:"id"`
	Type              string             `json:"type"`
	Zone              string             `json:"zone"`
	ImageID           string             `json:"imageId"`
	LaunchTime        time.Time          `json:"launchTime"`
	RootDevice        string             `json:"rootDevice"`
	NetworkInterfaces []NetworkInterface `json:"networkInterfaces"`
	Tags              map[string]string  `json:"tags,omitempty"`
	// Local marks the instance this host plays: volumes attached to it get a
	// real block device through the disk store, and IMDS describes it.
	Local bool `json:"local,omitempty"`
	// View, when set, is how the host plays this instance as well: its
	// volumes get real devices that the view exposes to it alone.
	View *disks.View `json:"view,omitempty"`
	// State is the instance's state (instancestate.go); empty is running.
	State InstanceState `json:"state,omitempty"`
	// StateDue is when a transitional state (pending, stopping,
	// shutting-down) ends.
	StateDue time.Time `json:"stateDue,omitzero"`
	// StateChanged is when the instance entered its state.
	StateChanged time.Time `json:"stateChanged,omitzero"`
	// StateReason is why the instance left running ("User initiated" for a
	// caller's stop or terminate); empty while it runs.
	StateReason string `json:"stateReason,omitempty"`
	// ImpairedSince, when set, is since when the running guest has not
	// answered: its instance status check fails (SetInstanceImpaired).
	ImpairedSince time.Time `json:"impairedSince,omitzero"`
}

// cloneVolume returns a deep copy of v.
func cloneVolume(v *Volume) Volume {
	c := *v
	c.Tags = maps.Clone(v.Tags)
	c.Attachments = make([]*Attachment, len(v.Attachments))
	for i, a := range v.Attachments {
		ac := *a
		c.Attachments[i] = &ac
	}
	if len(c.Attachments) == 0 {
		c.Attachments = nil
	}
	return c
}

// cloneSnapshot returns a deep copy of s.
func cloneSnapshot(s *Snapshot) Snapshot {
	c := *s
	c.Tags = maps.Clone(s.Tags)
	return c
}

// cloneInstance returns a deep copy of in.
func cloneInstance(in *Instance) Instance {
	c := *in
	c.Tags = maps.Clone(in.Tags)
	c.NetworkInterfaces = slices.Clone(in.NetworkInterfaces)
	for i := range c.NetworkInterfaces {
		c.NetworkInterfaces[i].PrivateIPs = slices.Clone(in.NetworkInterfaces[i].PrivateIPs)
	}
	if in.View != nil {
		view := *in.View
		c.View = &view
	}
	return c
}
