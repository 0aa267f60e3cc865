package model

import (
	"strconv"
	"time"
)

// instanceByID finds an instance with EC2's errors for a bad or unknown ID.
func (c *Cloud) instanceByID(id string) (*Instance, *Error) {
	if e := checkInstanceID(id); e != nil {
		return nil, e
	}
	in := c.st.Instances[id]
	if in == nil {
		return nil, instanceNotFound(id)
	}
	return in, nil
}

// selectInstances returns the instances named, every instance when none
// is; a malformed ID or any unknown one is an error, as on EC2.
func (c *Cloud) selectInstances(ids []string) ([]*Instance, *Error) {
	var ins []*Instance
	if len(ids) == 0 {
		for _, in := range c.st.Instances {
			ins = append(ins, in)
		}
		return ins, nil
	}
	var missing []string
	for _, id := range dedupe(ids) {
		if e := checkInstanceID(id); e != nil {
			return nil, e
		}
		if in := c.st.Instances[id]; in != nil {
			ins = append(ins, in)
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return nil, instanceNotFound(missing...)
	}
	return ins, nil
}

// instancePaging are DescribeInstances' MaxResults bounds.
var instancePaging = pageRules{param: "instanceId", min: 5, max: 1000}

// DescribeInstances lists instances with their block-device mappings.
func (c *Cloud) DescribeInstances(q Query) (Page[InstanceView], error) {
	var page Page[InstanceView]
	err := c.do(func(now time.Time) error {
		size, e := checkPaging(q, instancePaging)
		if e != nil {
			return e
		}
		ins, e := c.selectInstances(q.IDs)
		if e != nil {
			return e
		}
		w := c.readWorld(now, q.Lag)
		items := make([]InstanceView, 0, len(ins))
		for _, in := range ins {
			z, _ := findZone(c.cfg.Zones, in.Zone)
			items = append(items, InstanceView{Instance: cloneInstance(in), ZoneID: z.ID, BlockDevices: w.instanceAttachments(in.ID)})
		}
		items, e = filterItems(items, q.Filters, instanceField, func(v InstanceView) map[string]string { return v.Tags })
		if e != nil {
			return e
		}
		page, e = paginate(items, func(v InstanceView) string { return v.ID }, q, size)
		return asError(e)
	})
	return page, err
}

// instanceField answers the DescribeInstances filters.
func instanceField(v InstanceView, name string) ([]string, bool) {
	devices := func(f func(a Attachment) string) []string {
		var out []string
		for _, a := range v.BlockDevices {
			out = append(out, f(a))
		}
		return out
	}
	switch name {
	case "instance-id":
		return []string{v.ID}, true
	case "instance-type":
		return []string{v.Type}, true
	case "availability-zone":
		return []string{v.Zone}, true
	case "availability-zone-id":
		return []string{v.ZoneID}, true
	case "instance-state-name":
		return []string{string(v.StateValue())}, true
	case "image-id":
		return []string{v.ImageID}, true
	case "block-device-mapping.volume-id":
		return devices(func(a Attachment) string { return a.VolumeID }), true
	case "block-device-mapping.device-name":
		return devices(func(a Attachment) string { return a.Device }), true
	case "block-device-mapping.status":
		return devices(func(a Attachment) string { return string(a.State) }), true
	case "network-interface.mac-address":
		var out []string
		for _, n := range v.NetworkInterfaces {
			out = append(out, n.MAC)
		}
		return out, true
	}
	return nil, false
}

// Instances returns every instance, for the admin view and tests.
func (c *Cloud) Instances() []Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Instance, 0, len(c.st.Instances))
	for _, in := range c.st.Instances {
		out = append(out, cloneInstance(in))
	}
	sortByID(out, func(in Instance) string { return in.ID })
	return out
}

// instanceTypePaging are DescribeInstanceTypes' MaxResults bounds; without
// MaxResults EC2 answers 100 per page.
var instanceTypePaging = pageRules{min: 5, max: 100, byDefault: 100}

// DescribeInstanceTypes lists catalogue entries by name and filters. An
// unknown type name is an error, as on EC2.
func (c *Cloud) DescribeInstanceTypes(q Query) (Page[InstanceType], error) {
	size, e := checkPaging(q, instanceTypePaging)
	if e != nil {
		return Page[InstanceType]{}, e
	}
	var items []InstanceType
	if len(q.IDs) > 0 {
		for _, name := range dedupe(q.IDs) {
			t, ok := LookupInstanceType(name)
			if !ok {
				return Page[InstanceType]{}, Errorf(CodeInvalidParameterValue, "The following supplied instance types do not exist: [%s]", name)
			}
			items = append(items, t)
		}
	} else {
		for _, t := range instanceTypes {
			items = append(items, t)
		}
	}
	items, e = filterItems(items, q.Filters, instanceTypeField, func(InstanceType) map[string]string { return nil })
	if e != nil {
		return Page[InstanceType]{}, e
	}
	page, e := paginate(items, func(t InstanceType) string { return t.Name }, q, size)
	return page, asError(e)
}

// instanceTypeField answers the DescribeInstanceTypes filters.
func instanceTypeField(t InstanceType, name string) ([]string, bool) {
	switch name {
	case "instance-type":
		return []string{t.Name}, true
	case "hypervisor":
		return []string{t.Hypervisor}, true
	case "ebs-info.attachment-limit-type":
		return []string{string(t.LimitType)}, true
	case "ebs-info.maximum-ebs-attachments":
		return []string{strconv.Itoa(t.MaxAttachments)}, true
	case "instance-storage-supported":
		return []string{boolString(t.InstanceStoreNVMe > 0)}, true
	}
	return nil, false
}

// DescribeAvailabilityZones lists zones by name, ID and filters; naming an
// unknown zone is an error.
func (c *Cloud) DescribeAvailabilityZones(names, ids []string, filters []Filter) ([]Zone, error) {
	items := c.Zones()
	for _, n := range names {
		if _, ok := findZone(c.cfg.Zones, n); !ok {
			return nil, Errorf(CodeInvalidParameterValue, "The zone '%s' does not exist.", n)
		}
	}
	for _, id := range ids {
		found := false
		for _, z := range c.cfg.Zones {
			found = found || z.ID == id
		}
		if !found {
			return nil, Errorf(CodeInvalidParameterValue, "The zone ID '%s' does not exist.", id)
		}
	}
	if len(names) > 0 || len(ids) > 0 {
		items = filterEither(items, names, ids)
	}
	items, e := filterItems(items, filters, c.zoneField, func(Zone) map[string]string { return nil })
	return items, asError(e)
}

// filterEither keeps the zones named by name or by ID.
func filterEither(zones []Zone, names, ids []string) []Zone {
	var out []Zone
	for _, z := range zones {
		if anyMatch(names, []string{z.Name}) || anyMatch(ids, []string{z.ID}) {
			out = append(out, z)
		}
	}
	return out
}

// zoneField answers the DescribeAvailabilityZones filters.
func (c *Cloud) zoneField(z Zone, name string) ([]string, bool) {
	switch name {
	case "zone-name":
		return []string{z.Name}, true
	case "zone-id":
		return []string{z.ID}, true
	case "region-name":
		return []string{c.cfg.Region}, true
	case "state":
		return []string{"available"}, true
	case "zone-type":
		return []string{"availability-zone"}, true
	case "group-name":
		return []string{c.cfg.Region}, true
	}
	return nil, false
}

// VolumeStatus is one volume's status as DescribeVolumeStatus reports it:
// the health the admin API set (healthy unless set); volumes restored from a
// snapshot report their initialization as done unless it says otherwise.
type VolumeStatus struct {
	VolumeID     string
	Zone         string
	ZoneID       string
	FromSnapshot bool
	Attachments  []string
	Health       VolumeHealth
}

// volumeStatusPaging are DescribeVolumeStatus' MaxResults bounds.
var volumeStatusPaging = pageRules{param: "volumeId", min: 5, max: 1000}

// DescribeVolumeStatus reports the health of volumes.
func (c *Cloud) DescribeVolumeStatus(q Query) (Page[VolumeStatus], error) {
	var page Page[VolumeStatus]
	err := c.do(func(now time.Time) error {
		size, e := checkPaging(q, volumeStatusPaging)
		if e != nil {
			return e
		}
		vols, e := c.selectVolumes(Query{IDs: q.IDs, Hide: q.Hide, Lag: q.Lag}, now)
		if e != nil {
			return e
		}
		var items []VolumeStatus
		for _, v := range vols {
			z, _ := findZone(c.cfg.Zones, v.Zone)
			st := VolumeStatus{VolumeID: v.ID, Zone: v.Zone, ZoneID: z.ID, FromSnapshot: v.SnapshotID != "", Health: v.Health}
			for _, a := range v.Attachments {
				st.Attachments = append(st.Attachments, a.InstanceID)
			}
			items = append(items, st)
		}
		items, e = filterItems(items, q.Filters, volumeStatusField, func(VolumeStatus) map[string]string { return nil })
		if e != nil {
			return e
		}
		page, e = paginate(items, func(s VolumeStatus) string { return s.VolumeID }, q, size)
		return asError(e)
	})
	return page, err
}

// volumeStatusField answers the DescribeVolumeStatus filters.
func volumeStatusField(s VolumeStatus, name string) ([]string, bool) {
	h := s.Health
	var vals []string
	switch name {
	case "availability-zone":
		return []string{s.Zone}, true
	case "volume-status.status":
		return []string{h.StatusValue()}, true
	case "volume-status.details-name":
		return []string{"io-enabled", "io-performance"}, true
	case "volume-status.details-status":
		return []string{h.IOEnabledValue(), h.IOPerformanceValue()}, true
	case "event.event-type", "event.event-id", "event.description", "event.not-before", "event.not-after":
		for _, e := range h.Events {
			vals = append(vals, e.field(name))
		}
		return vals, true
	case "action.code", "action.event-id", "action.description":
		for _, a := range h.Actions {
			vals = append(vals, a.field(name))
		}
		return vals, true
	}
	return nil, false
}
