package model

import (
	"strconv"
	"time"
)

// StatusNotApplicable is an instance's status checks while it is not
// running; the others are StatusOK and StatusImpaired, each with a
// reachability detail of CheckPassed or CheckFailed (health.go).
const StatusNotApplicable = "not-applicable"

// InstanceStatus is one instance's entry in DescribeInstanceStatus: its
// state and EC2's two status checks. System is the host's (always ok
// here); Instance is the guest's, impaired while it does not answer
// (SetInstanceImpaired). Neither applies to an instance that is not
// running.
type InstanceStatus struct {
	InstanceID string
	Zone       string
	ZoneID     string
	State      InstanceState
	// Instance and System are ok, impaired or not-applicable.
	Instance string
	System   string
	// InstanceReachability and SystemReachability are the checks' detail:
	// passed or failed; empty when the check does not apply.
	InstanceReachability string
	SystemReachability   string
	// ImpairedSince is when the instance check began to fail.
	ImpairedSince time.Time
}

// instanceStatusPaging are DescribeInstanceStatus' MaxResults bounds.
var instanceStatusPaging = pageRules{param: "instanceId", min: 5, max: 1000}

// DescribeInstanceStatus reports the status checks of the instances named
// (every instance when none is). Only running instances are reported
// unless includeAll, as on EC2: a stopped instance named is then left out,
// not an error.
func (c *Cloud) DescribeInstanceStatus(q Query, includeAll bool) (Page[InstanceStatus], error) {
	var page Page[InstanceStatus]
	err := c.do(func(time.Time) error {
		size, e := checkPaging(q, instanceStatusPaging)
		if e != nil {
			return e
		}
		ins, e := c.selectInstances(q.IDs)
		if e != nil {
			return e
		}
		var items []InstanceStatus
		for _, in := range ins {
			if !includeAll && in.StateValue() != InstanceRunning {
				continue
			}
			items = append(items, c.instanceStatus(in))
		}
		items, e = filterItems(items, q.Filters, instanceStatusField, func(InstanceStatus) map[string]string { return nil })
		if e != nil {
			return e
		}
		page, e = paginate(items, func(s InstanceStatus) string { return s.InstanceID }, q, size)
		return asError(e)
	})
	return page, err
}

// instanceStatus is what the status checks say of an instance now.
func (c *Cloud) instanceStatus(in *Instance) InstanceStatus {
	z, _ := findZone(c.cfg.Zones, in.Zone)
	st := InstanceStatus{InstanceID: in.ID, Zone: in.Zone, ZoneID: z.ID, State: in.StateValue(),
		Instance: StatusNotApplicable, System: StatusNotApplicable}
	if st.State != InstanceRunning {
		return st
	}
	st.System, st.SystemReachability = StatusOK, CheckPassed
	st.Instance, st.InstanceReachability = StatusOK, CheckPassed
	if !in.ImpairedSince.IsZero() {
		st.Instance, st.InstanceReachability, st.ImpairedSince = StatusImpaired, CheckFailed, in.ImpairedSince
	}
	return st
}

// instanceStatusField answers the DescribeInstanceStatus filters.
func instanceStatusField(s InstanceStatus, name string) ([]string, bool) {
	switch name {
	case "availability-zone":
		return []string{s.Zone}, true
	case "instance-state-name":
		return []string{string(s.State)}, true
	case "instance-state-code":
		return []string{strconv.Itoa(s.State.Code())}, true
	case "instance-status.status":
		return []string{s.Instance}, true
	case "instance-status.reachability":
		return []string{s.InstanceReachability}, true
	case "system-status.status":
		return []string{s.System}, true
	case "system-status.reachability":
		return []string{s.SystemReachability}, true
	}
	return nil, false
}
