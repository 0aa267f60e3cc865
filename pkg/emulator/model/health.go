package model

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
)

// The values of DescribeVolumeStatus' overall status and its checks, as
// EC2 reports them.
const (
	StatusOK               = "ok"
	StatusImpaired         = "impaired"
	StatusWarning          = "warning"
	StatusInsufficientData = "insufficient-data"

	CheckPassed = "passed"
	CheckFailed = "failed"

	PerformanceNotApplicable    = "not-applicable"
	PerformanceNormal           = "normal"
	PerformanceDegraded         = "degraded"
	PerformanceSeverelyDegraded = "severely-degraded"
	PerformanceStalled          = "stalled"
)

// VolumeHealth is what DescribeVolumeStatus reports about a volume. EC2
// derives it from checks on its own hardware; in the emulator a person or a
// test sets it through the admin API (every field may be left out), and a
// volume nobody set is healthy: status ok, I/O enabled, no events. It is
// replaced as a whole, never changed in place, so the copies the model
// hands out may share its lists.
type VolumeHealth struct {
	// Status is ok (the default), impaired, warning or insufficient-data.
	Status string `json:"status,omitempty"`
	// IOEnabled is the io-enabled check: passed (the default), failed (EC2
	// disabled the volume's I/O) or insufficient-data.
	IOEnabled string `json:"ioEnabled,omitempty"`
	// IOPerformance is the io-performance check: not-applicable (the
	// default), normal, degraded, severely-degraded, stalled or
	// insufficient-data.
	IOPerformance string `json:"ioPerformance,omitempty"`
	// Events and Actions are reported as given.
	Events  []VolumeEvent  `json:"events,omitempty"`
	Actions []VolumeAction `json:"actions,omitempty"`
	// Initialization, when set, is reported instead of the default for a
	// volume made from a snapshot (initialized: 100%), and for a volume made
	// otherwise too.
	Initialization *VolumeInitialization `json:"initialization,omitempty"`
}

// VolumeEvent is an event of DescribeVolumeStatus.
type VolumeEvent struct {
	ID          string    `json:"id,omitempty"`
	Type        string    `json:"type"`
	Description string    `json:"description,omitempty"`
	InstanceID  string    `json:"instanceId,omitempty"`
	NotBefore   time.Time `json:"notBefore,omitzero"`
	NotAfter    time.Time `json:"notAfter,omitzero"`
}

// VolumeAction is an action of DescribeVolumeStatus.
type VolumeAction struct {
	Code        string `json:"code"`
	Description string `json:"description,omitempty"`
	EventID     string `json:"eventId,omitempty"`
	EventType   string `json:"eventType,omitempty"`
}

// VolumeInitialization is DescribeVolumeStatus' initialization progress.
type VolumeInitialization struct {
	// Type is default, provisioned-rate or volume-copy.
	Type string `json:"type"`
	// Progress is the percentage done.
	Progress int64 `json:"progress"`
	// EstimatedSeconds is the time EC2 expects it still takes.
	EstimatedSeconds int64 `json:"estimatedSeconds,omitempty"`
}

// StatusValue is the overall status reported, the default filled in.
func (h VolumeHealth) StatusValue() string { return orDefault(h.Status, StatusOK) }

// IOEnabledValue is the io-enabled check reported, the default filled in.
func (h VolumeHealth) IOEnabledValue() string { return orDefault(h.IOEnabled, CheckPassed) }

// IOPerformanceValue is the io-performance check reported, the default
// filled in.
func (h VolumeHealth) IOPerformanceValue() string {
	return orDefault(h.IOPerformance, PerformanceNotApplicable)
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// validate refuses values EC2 never reports.
func (h VolumeHealth) validate() error {
	var errs []error
	check := func(what, v string, allowed ...string) {
		if v != "" && !slices.Contains(allowed, v) {
			errs = append(errs, fmt.Errorf("%s %q: want one of %v", what, v, allowed))
		}
	}
	check("status", h.Status, StatusOK, StatusImpaired, StatusWarning, StatusInsufficientData)
	check("ioEnabled", h.IOEnabled, CheckPassed, CheckFailed, StatusInsufficientData)
	check("ioPerformance", h.IOPerformance, PerformanceNotApplicable, PerformanceNormal, PerformanceDegraded,
		PerformanceSeverelyDegraded, PerformanceStalled, StatusInsufficientData)
	for i, e := range h.Events {
		if e.Type == "" {
			errs = append(errs, fmt.Errorf("event %d has no type", i+1))
		}
		if !e.NotBefore.IsZero() && !e.NotAfter.IsZero() && e.NotAfter.Before(e.NotBefore) {
			errs = append(errs, fmt.Errorf("event %d ends (notAfter) before it starts (notBefore)", i+1))
		}
	}
	for i, a := range h.Actions {
		if a.Code == "" {
			errs = append(errs, fmt.Errorf("action %d has no code", i+1))
		}
	}
	if in := h.Initialization; in != nil {
		check("initialization type", in.Type, "default", "provisioned-rate", "volume-copy")
		if in.Type == "" {
			errs = append(errs, errors.New("initialization has no type"))
		}
		if in.Progress < 0 || in.Progress > 100 || in.EstimatedSeconds < 0 {
			errs = append(errs, fmt.Errorf("initialization progress %d%% and %d s left: want 0-100%% and no negative time", in.Progress, in.EstimatedSeconds))
		}
	}
	return errors.Join(errs...)
}

// SetVolumeHealth replaces what DescribeVolumeStatus reports about a
// volume. It does not touch the volume's device: on EC2 a volume whose I/O
// check failed also stops serving I/O, which FailVolumeIO plays for writes.
func (c *Cloud) SetVolumeHealth(id string, h VolumeHealth) error {
	if err := h.validate(); err != nil {
		return Errorf(CodeInvalidParameterValue, "volume health of %s: %v", id, err)
	}
	return c.do(func(now time.Time) error {
		v, e := c.volumeByID(id, 0, now)
		if e != nil {
			return e
		}
		h.Events, h.Actions = slices.Clone(h.Events), slices.Clone(h.Actions)
		if h.Initialization != nil {
			in := *h.Initialization
			h.Initialization = &in
		}
		v.Health = h
		c.markDirty()
		klog.InfoS("Volume health set", "volumeID", id, "status", h.StatusValue(), "ioEnabled", h.IOEnabledValue(),
			"ioPerformance", h.IOPerformanceValue(), "events", len(h.Events))
		return nil
	})
}

// VolumeHealthOf returns what was set for a volume (the zero value: healthy).
func (c *Cloud) VolumeHealthOf(id string) (VolumeHealth, error) {
	var out VolumeHealth
	err := c.do(func(now time.Time) error {
		v, e := c.volumeByID(id, 0, now)
		if e != nil {
			return e
		}
		out = v.Health
		return nil
	})
	return out, err
}

// ErrNoIOFaults means the disk store cannot make a device fail its I/O (it
// keeps state only, or the instance is a VM).
var ErrNoIOFaults = errors.New("this disk store cannot make a device fail its I/O; run the emulator with loop devices")

// FailVolumeIO makes the device of a volume attached to this host fail
// every write with an I/O error (fail), or serve writes again, while the
// volume stays attached: what a disk whose storage went bad does to a
// mounted filesystem. The fault ends by itself when the volume is detached.
func (c *Cloud) FailVolumeIO(id string, fail bool) error {
	f, ok := c.cfg.Store.(disks.IOFaulter)
	if !ok {
		return ErrNoIOFaults
	}
	return c.do(func(now time.Time) error {
		v, e := c.volumeByID(id, 0, now)
		if e != nil {
			return e
		}
		onHost := false
		for _, a := range v.Attachments {
			onHost = onHost || (a.State == AttachmentAttached && c.onHost(v, a))
		}
		if !onHost {
			return Errorf(CodeIncorrectState, "volume %s is not attached to the local instance, so it has no device here", id)
		}
		return f.FailIO(id, fail)
	})
}

// field is the event's value for a DescribeVolumeStatus event.* filter.
func (e VolumeEvent) field(name string) string {
	switch name {
	case "event.event-type":
		return e.Type
	case "event.event-id":
		return e.ID
	case "event.description":
		return e.Description
	case "event.not-before":
		return formatTime(e.NotBefore)
	case "event.not-after":
		return formatTime(e.NotAfter)
	}
	return ""
}

// field is the action's value for a DescribeVolumeStatus action.* filter.
func (a VolumeAction) field(name string) string {
	switch name {
	case "action.code":
		return a.Code
	case "action.event-id":
		return a.EventID
	case "action.description":
		return a.Description
	}
	return ""
}

// formatTime renders a time as filters compare it; the zero time as "".
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(TimeFormat)
}
