package ec2api

import (
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// changeInstances serves StopInstances, StartInstances and
// TerminateInstances: InstanceId.N and DryRun (StopInstances' Force and
// Hibernate are accepted; a forced stop ends as a clean one does here).
func (h *handler) changeInstances(p params, change func(ids []string, dryRun bool) ([]model.InstanceStateChange, error)) (requestIDSetter, error) {
	dry, err := p.boolv("DryRun")
	if err != nil {
		return nil, err
	}
	for _, flag := range []string{"Force", "Hibernate"} {
		if _, err := p.boolp(flag); err != nil {
			return nil, err
		}
	}
	changes, err := change(p.list("InstanceId"), dry)
	if err != nil {
		return nil, err
	}
	out := &instanceStateChangesResponse{}
	for _, c := range changes {
		out.Instances.Items = append(out.Instances.Items, instanceStateChangeXML{
			InstanceID: c.InstanceID, Current: stateXML(c.Current), Previous: stateXML(c.Previous),
		})
	}
	return out, nil
}

func (h *handler) stopInstances(p params) (requestIDSetter, error) {
	return h.changeInstances(p, h.cloud.StopInstances)
}

func (h *handler) startInstances(p params) (requestIDSetter, error) {
	return h.changeInstances(p, h.cloud.StartInstances)
}

func (h *handler) terminateInstances(p params) (requestIDSetter, error) {
	return h.changeInstances(p, h.cloud.TerminateInstances)
}

func (h *handler) describeInstanceStatus(p params) (requestIDSetter, error) {
	q, err := p.query("InstanceId")
	if err != nil {
		return nil, err
	}
	all, err := p.boolv("IncludeAllInstances")
	if err != nil {
		return nil, err
	}
	page, err := h.cloud.DescribeInstanceStatus(q, all)
	if err != nil {
		return nil, err
	}
	out := &instanceStatusResponse{NextToken: page.NextToken}
	for _, s := range page.Items {
		out.Statuses.Items = append(out.Statuses.Items, instanceStatusXML{
			InstanceID: s.InstanceID, AvailabilityZone: s.Zone, AvailabilityZoneID: s.ZoneID, State: stateXML(s.State),
			SystemStatus:   checkXML(s.System, s.SystemReachability, s.ImpairedSince),
			InstanceStatus: checkXML(s.Instance, s.InstanceReachability, s.ImpairedSince),
		})
	}
	return out, nil
}
