package ec2api

import (
	"sort"
	"strconv"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// The XML documents the emulator answers with. Element names are EC2's
// (lower camel case, lists as <xxxSet><item>…</item></xxxSet>), as the
// aws-sdk-go-v2 EC2 deserializers read them.

// header carries the request ID every EC2 response starts with.
type header struct {
	RequestID string `xml:"requestId"`
}

func (h *header) setRequestID(id string) { h.RequestID = id }

// requestIDSetter is implemented by every response document.
type requestIDSetter interface{ setRequestID(string) }

// returnResponse is the body of actions EC2 answers with just <return>.
type returnResponse struct {
	header
	Return bool `xml:"return"`
}

type tagXML struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

// tagSet is omitted when a resource has no tags, as EC2 does.
type tagSet struct {
	Items []tagXML `xml:"item"`
}

func tagsXML(tags map[string]string) *tagSet {
	if len(tags) == 0 {
		return nil
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := &tagSet{}
	for _, k := range keys {
		s.Items = append(s.Items, tagXML{Key: k, Value: tags[k]})
	}
	return s
}

func ts(t time.Time) string { return t.UTC().Format(model.TimeFormat) }

type attachmentXML struct {
	VolumeID            string `xml:"volumeId"`
	InstanceID          string `xml:"instanceId"`
	Device              string `xml:"device"`
	Status              string `xml:"status"`
	AttachTime          string `xml:"attachTime"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

func attachmentOut(a model.Attachment) attachmentXML {
	return attachmentXML{
		VolumeID: a.VolumeID, InstanceID: a.InstanceID, Device: a.Device, Status: string(a.State),
		AttachTime: ts(a.AttachTime), DeleteOnTermination: a.DeleteOnTermination,
	}
}

type volumeXML struct {
	VolumeID           string `xml:"volumeId"`
	Size               int32  `xml:"size"`
	SnapshotID         string `xml:"snapshotId"`
	SourceVolumeID     string `xml:"sourceVolumeId,omitempty"`
	AvailabilityZone   string `xml:"availabilityZone"`
	AvailabilityZoneID string `xml:"availabilityZoneId"`
	Status             string `xml:"status"`
	CreateTime         string `xml:"createTime"`
	Attachments        struct {
		Items []attachmentXML `xml:"item"`
	} `xml:"attachmentSet"`
	Tags               *tagSet `xml:"tagSet"`
	VolumeType         string  `xml:"volumeType"`
	Iops               *int32  `xml:"iops"`
	Throughput         *int32  `xml:"throughput"`
	Encrypted          bool    `xml:"encrypted"`
	KmsKeyID           string  `xml:"kmsKeyId,omitempty"`
	MultiAttachEnabled bool    `xml:"multiAttachEnabled"`
	FastRestored       *bool   `xml:"fastRestored"`
}

func optional(n int32) *int32 {
	if n == 0 {
		return nil
	}
	return &n
}

func (h *handler) volumeOut(v model.Volume) volumeXML {
	out := volumeXML{
		VolumeID: v.ID, Size: v.Size, SnapshotID: v.SnapshotID, SourceVolumeID: v.SourceVolumeID,
		AvailabilityZone: v.Zone, AvailabilityZoneID: h.zoneID(v.Zone), Status: string(v.State),
		CreateTime: ts(v.CreateTime), Tags: tagsXML(v.Tags), VolumeType: v.Type,
		Iops:       optional(model.VolumeSettings{Type: v.Type, Size: v.Size, Iops: v.Iops}.ReportedIops()),
		Throughput: optional(v.Throughput), Encrypted: v.Encrypted, KmsKeyID: v.KmsKeyID,
		MultiAttachEnabled: v.MultiAttach,
	}
	if v.SnapshotID != "" {
		f := false
		out.FastRestored = &f
	}
	for _, a := range v.Attachments {
		out.Attachments.Items = append(out.Attachments.Items, attachmentOut(*a))
	}
	return out
}

// createVolumeResponse is CreateVolume's answer: the volume's fields at the
// top level.
type createVolumeResponse struct {
	header
	volumeXML
}

type volumeSetResponse struct {
	header
	Volumes struct {
		Items []volumeXML `xml:"item"`
	} `xml:"volumeSet"`
	NextToken string `xml:"nextToken,omitempty"`
}

type attachmentResponse struct {
	header
	attachmentXML
}

type modificationXML struct {
	VolumeID                   string `xml:"volumeId"`
	ModificationState          string `xml:"modificationState"`
	TargetSize                 int32  `xml:"targetSize"`
	TargetIops                 *int32 `xml:"targetIops"`
	TargetVolumeType           string `xml:"targetVolumeType"`
	TargetThroughput           *int32 `xml:"targetThroughput"`
	TargetMultiAttachEnabled   bool   `xml:"targetMultiAttachEnabled"`
	OriginalSize               int32  `xml:"originalSize"`
	OriginalIops               *int32 `xml:"originalIops"`
	OriginalVolumeType         string `xml:"originalVolumeType"`
	OriginalThroughput         *int32 `xml:"originalThroughput"`
	OriginalMultiAttachEnabled bool   `xml:"originalMultiAttachEnabled"`
	Progress                   int    `xml:"progress"`
	StartTime                  string `xml:"startTime"`
	EndTime                    string `xml:"endTime,omitempty"`
}

func modificationOut(m model.Modification) modificationXML {
	out := modificationXML{
		VolumeID: m.VolumeID, ModificationState: string(m.State),
		TargetSize: m.Target.Size, TargetIops: optional(m.Target.ReportedIops()), TargetVolumeType: m.Target.Type,
		TargetThroughput: optional(m.Target.Throughput), TargetMultiAttachEnabled: m.Target.MultiAttach,
		OriginalSize: m.Original.Size, OriginalIops: optional(m.Original.ReportedIops()), OriginalVolumeType: m.Original.Type,
		OriginalThroughput: optional(m.Original.Throughput), OriginalMultiAttachEnabled: m.Original.MultiAttach,
		Progress: m.Progress, StartTime: ts(m.StartTime),
	}
	if !m.EndTime.IsZero() {
		out.EndTime = ts(m.EndTime)
	}
	return out
}

type modifyVolumeResponse struct {
	header
	Modification modificationXML `xml:"volumeModification"`
}

type modificationSetResponse struct {
	header
	Modifications struct {
		Items []modificationXML `xml:"item"`
	} `xml:"volumeModificationSet"`
	NextToken string `xml:"nextToken,omitempty"`
}

// statusDetailXML is one detail of a status check; ImpairedSince is set
// on an instance's failed reachability check.
type statusDetailXML struct {
	Name          string `xml:"name"`
	Status        string `xml:"status"`
	ImpairedSince string `xml:"impairedSince,omitempty"`
}

type volumeStatusXML struct {
	VolumeID           string `xml:"volumeId"`
	AvailabilityZone   string `xml:"availabilityZone"`
	AvailabilityZoneID string `xml:"availabilityZoneId"`
	VolumeStatus       struct {
		Status  string `xml:"status"`
		Details struct {
			Items []statusDetailXML `xml:"item"`
		} `xml:"details"`
	} `xml:"volumeStatus"`
	Events struct {
		Items []volumeEventXML `xml:"item"`
	} `xml:"eventsSet"`
	Actions struct {
		Items []volumeActionXML `xml:"item"`
	} `xml:"actionsSet"`
	AttachmentStatuses struct {
		Items []attachmentStatusXML `xml:"item"`
	} `xml:"attachmentStatuses"`
	Initialization *initializationXML `xml:"initializationStatusDetails"`
}

type attachmentStatusXML struct {
	InstanceID    string `xml:"instanceId"`
	IoPerformance string `xml:"ioPerformance"`
}

type initializationXML struct {
	Type     string `xml:"initializationType"`
	Progress int64  `xml:"progress"`
	Estimate int64  `xml:"estimatedTimeToCompleteInSeconds"`
}

type volumeEventXML struct {
	EventID     string `xml:"eventId,omitempty"`
	EventType   string `xml:"eventType"`
	Description string `xml:"description,omitempty"`
	InstanceID  string `xml:"instanceId,omitempty"`
	NotBefore   string `xml:"notBefore,omitempty"`
	NotAfter    string `xml:"notAfter,omitempty"`
}

type volumeActionXML struct {
	Code        string `xml:"code"`
	Description string `xml:"description,omitempty"`
	EventID     string `xml:"eventId,omitempty"`
	EventType   string `xml:"eventType,omitempty"`
}

// optionalTS renders a time, or nothing for the zero time.
func optionalTS(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return ts(t)
}

func volumeStatusOut(s model.VolumeStatus) volumeStatusXML {
	var out volumeStatusXML
	h := s.Health
	out.VolumeID, out.AvailabilityZone, out.AvailabilityZoneID = s.VolumeID, s.Zone, s.ZoneID
	out.VolumeStatus.Status = h.StatusValue()
	out.VolumeStatus.Details.Items = []statusDetailXML{
		{Name: "io-enabled", Status: h.IOEnabledValue()}, {Name: "io-performance", Status: h.IOPerformanceValue()},
	}
	for _, e := range h.Events {
		out.Events.Items = append(out.Events.Items, volumeEventXML{
			EventID: e.ID, EventType: e.Type, Description: e.Description, InstanceID: e.InstanceID,
			NotBefore: optionalTS(e.NotBefore), NotAfter: optionalTS(e.NotAfter),
		})
	}
	for _, a := range h.Actions {
		out.Actions.Items = append(out.Actions.Items, volumeActionXML{Code: a.Code, Description: a.Description, EventID: a.EventID, EventType: a.EventType})
	}
	perf := h.IOPerformance
	if perf == "" || perf == model.PerformanceNotApplicable {
		perf = model.PerformanceNormal
	}
	for _, id := range s.Attachments {
		out.AttachmentStatuses.Items = append(out.AttachmentStatuses.Items, attachmentStatusXML{InstanceID: id, IoPerformance: perf})
	}
	switch {
	case h.Initialization != nil:
		in := h.Initialization
		out.Initialization = &initializationXML{Type: in.Type, Progress: in.Progress, Estimate: in.EstimatedSeconds}
	case s.FromSnapshot:
		out.Initialization = &initializationXML{Type: "default", Progress: 100}
	}
	return out
}

type volumeStatusResponse struct {
	header
	Statuses struct {
		Items []volumeStatusXML `xml:"item"`
	} `xml:"volumeStatusSet"`
	NextToken string `xml:"nextToken,omitempty"`
}

type snapshotXML struct {
	SnapshotID  string  `xml:"snapshotId"`
	VolumeID    string  `xml:"volumeId"`
	Status      string  `xml:"status"`
	Message     string  `xml:"statusMessage,omitempty"`
	StartTime   string  `xml:"startTime"`
	Progress    string  `xml:"progress"`
	OwnerID     string  `xml:"ownerId"`
	VolumeSize  int32   `xml:"volumeSize"`
	Description string  `xml:"description"`
	Encrypted   bool    `xml:"encrypted"`
	KmsKeyID    string  `xml:"kmsKeyId,omitempty"`
	StorageTier string  `xml:"storageTier"`
	Completion  string  `xml:"completionTime,omitempty"`
	Tags        *tagSet `xml:"tagSet"`
}

func snapshotOut(s model.Snapshot) snapshotXML {
	out := snapshotXML{
		SnapshotID: s.ID, VolumeID: s.VolumeID, Status: string(s.State), StartTime: ts(s.StartTime),
		Progress: strconv.Itoa(s.Progress) + "%", OwnerID: s.OwnerID, VolumeSize: s.VolumeSize,
		Description: s.Description, Encrypted: s.Encrypted, KmsKeyID: s.KmsKeyID, StorageTier: "standard",
		Tags: tagsXML(s.Tags), Message: s.StateMessage,
	}
	if !s.Completion.IsZero() {
		out.Completion = ts(s.Completion)
	}
	return out
}

type createSnapshotResponse struct {
	header
	snapshotXML
}

type snapshotSetResponse struct {
	header
	Snapshots struct {
		Items []snapshotXML `xml:"item"`
	} `xml:"snapshotSet"`
	NextToken string `xml:"nextToken,omitempty"`
}

type tagDescriptionXML struct {
	ResourceID   string `xml:"resourceId"`
	ResourceType string `xml:"resourceType"`
	Key          string `xml:"key"`
	Value        string `xml:"value"`
}

type tagSetResponse struct {
	header
	Tags struct {
		Items []tagDescriptionXML `xml:"item"`
	} `xml:"tagSet"`
	NextToken string `xml:"nextToken,omitempty"`
}
