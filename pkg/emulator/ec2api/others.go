package ec2api

import (
	"strconv"

	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func (h *handler) createSnapshot(p params) (requestIDSetter, error) {
	var in model.CreateSnapshotInput
	var err [3]error
	in.VolumeID, err[0] = required(p, "VolumeId")
	in.Description = p.str("Description")
	in.Tags, err[1] = p.tagSpecs("snapshot")
	in.DryRun, err[2] = p.boolv("DryRun")
	if e := firstErr(err[:]...); e != nil {
		return nil, e
	}
	s, e := h.cloud.CreateSnapshot(in)
	if e != nil {
		return nil, e
	}
	return &createSnapshotResponse{snapshotXML: snapshotOut(s)}, nil
}

func (h *handler) deleteSnapshot(p params) (requestIDSetter, error) {
	id, err := required(p, "SnapshotId")
	if err != nil {
		return nil, err
	}
	dry, err := p.boolv("DryRun")
	if err != nil {
		return nil, err
	}
	if err := h.cloud.DeleteSnapshot(id, dry); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}

func (h *handler) describeSnapshots(p params) (requestIDSetter, error) {
	q, err := h.describeQuery(p, "SnapshotId")
	if err != nil {
		return nil, err
	}
	page, err := h.cloud.DescribeSnapshots(model.SnapshotQuery{Query: q, Owners: p.list("Owner")})
	if err != nil {
		return nil, err
	}
	out := &snapshotSetResponse{NextToken: page.NextToken}
	for _, s := range page.Items {
		out.Snapshots.Items = append(out.Snapshots.Items, snapshotOut(s))
	}
	return out, nil
}

func (h *handler) createTags(p params) (requestIDSetter, error) {
	tags, err := p.tags("Tag")
	if err != nil {
		return nil, err
	}
	dry, err := p.boolv("DryRun")
	if err != nil {
		return nil, err
	}
	if err := h.cloud.CreateTags(p.list("ResourceId"), tags, dry); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}

func (h *handler) deleteTags(p params) (requestIDSetter, error) {
	var tags []model.TagToDelete
	for _, n := range p.indexes("Tag") {
		base := "Tag." + strconv.Itoa(n)
		d := model.TagToDelete{Key: p.str(base + ".Key")}
		if p.has(base + ".Value") {
			v := p.str(base + ".Value")
			d.Value = &v
		}
		tags = append(tags, d)
	}
	dry, err := p.boolv("DryRun")
	if err != nil {
		return nil, err
	}
	if err := h.cloud.DeleteTags(p.list("ResourceId"), tags, dry); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}

func (h *handler) describeTags(p params) (requestIDSetter, error) {
	q, err := h.describeQuery(p, "")
	if err != nil {
		return nil, err
	}
	page, err := h.cloud.DescribeTags(q)
	if err != nil {
		return nil, err
	}
	out := &tagSetResponse{NextToken: page.NextToken}
	for _, t := range page.Items {
		out.Tags.Items = append(out.Tags.Items, tagDescriptionXML(t))
	}
	return out, nil
}

func (h *handler) describeInstances(p params) (requestIDSetter, error) {
	q, err := p.query("InstanceId")
	if err != nil {
		return nil, err
	}
	if h.faults != nil {
		// Block-device mappings are attachments: stale like the volumes'.
		q.Lag = h.faults.ReadLag()
	}
	page, err := h.cloud.DescribeInstances(q)
	if err != nil {
		return nil, err
	}
	out := &describeInstancesResponse{NextToken: page.NextToken}
	for _, v := range page.Items {
		r := reservationXML{ReservationID: "r-" + v.ID[len("i-"):], OwnerID: h.cloud.AccountID()}
		r.Instances.Items = []instanceXML{h.instanceOut(v)}
		out.Reservations.Items = append(out.Reservations.Items, r)
	}
	return out, nil
}

func (h *handler) describeInstanceTypes(p params) (requestIDSetter, error) {
	q, err := p.query("InstanceType")
	if err != nil {
		return nil, err
	}
	page, err := h.cloud.DescribeInstanceTypes(q)
	if err != nil {
		return nil, err
	}
	out := &instanceTypesResponse{NextToken: page.NextToken}
	for _, t := range page.Items {
		out.Types.Items = append(out.Types.Items, instanceTypeOut(t))
	}
	return out, nil
}

func (h *handler) describeAvailabilityZones(p params) (requestIDSetter, error) {
	filters, err := p.filters()
	if err != nil {
		return nil, err
	}
	zones, err := h.cloud.DescribeAvailabilityZones(p.list("ZoneName"), p.list("ZoneId"), filters)
	if err != nil {
		return nil, err
	}
	out := &zonesResponse{}
	region := h.cloud.Region()
	for _, z := range zones {
		out.Zones.Items = append(out.Zones.Items, zoneXML{
			ZoneName: z.Name, ZoneID: z.ID, ZoneState: "available", RegionName: region, ZoneType: "availability-zone",
			OptInStatus: "opt-in-not-required", GroupName: region, NetworkBorderGroup: region,
		})
	}
	return out, nil
}
