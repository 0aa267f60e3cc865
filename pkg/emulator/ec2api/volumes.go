package ec2api

import (
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// describeQuery reads a Describe* request's IDs, filters and paging, with
// the eventual-consistency and stale-reads faults applied.
func (h *handler) describeQuery(p params, idPrefix string) (model.Query, error) {
	q, err := p.query(idPrefix)
	if h.faults != nil {
		q.Hide = h.faults.Hide()
		q.Lag = h.faults.ReadLag()
	}
	return q, err
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (h *handler) createVolume(p params) (requestIDSetter, error) {
	var in model.CreateVolumeInput
	var err [7]error
	in.Zone, in.ZoneID, in.Type, in.KmsKeyID = p.str("AvailabilityZone"), p.str("AvailabilityZoneId"), p.str("VolumeType"), p.str("KmsKeyId")
	in.SnapshotID, in.ClientToken = p.str("SnapshotId"), p.str("ClientToken")
	in.Size, err[0] = p.int32v("Size")
	in.Iops, err[1] = p.int32p("Iops")
	in.Throughput, err[2] = p.int32p("Throughput")
	in.Encrypted, err[3] = p.boolp("Encrypted")
	in.MultiAttach, err[4] = p.boolp("MultiAttachEnabled")
	in.Tags, err[5] = p.tagSpecs("volume")
	in.DryRun, err[6] = p.boolv("DryRun")
	if e := firstErr(append(err[:], h.checkKey(in.KmsKeyID, in.Encrypted))...); e != nil {
		return nil, e
	}
	v, e := h.cloud.CreateVolume(in)
	if e != nil {
		return nil, e
	}
	return &createVolumeResponse{volumeXML: h.volumeOut(v)}, nil
}

func (h *handler) copyVolumes(p params) (requestIDSetter, error) {
	var in model.CopyVolumesInput
	var err [7]error
	in.SourceVolumeID, in.Type, in.KmsKeyID, in.ClientToken = p.str("SourceVolumeId"), p.str("VolumeType"), p.str("KmsKeyId"), p.str("ClientToken")
	if in.SourceVolumeID == "" {
		return nil, model.Errorf(model.CodeMissingParameter, "The request must contain the parameter SourceVolumeId")
	}
	in.Size, err[0] = p.int32v("Size")
	in.Iops, err[1] = p.int32p("Iops")
	in.Throughput, err[2] = p.int32p("Throughput")
	in.Encrypted, err[3] = p.boolp("Encrypted")
	in.MultiAttach, err[4] = p.boolp("MultiAttachEnabled")
	in.Tags, err[5] = p.tagSpecs("volume")
	in.DryRun, err[6] = p.boolv("DryRun")
	if e := firstErr(append(err[:], h.checkKey(in.KmsKeyID, in.Encrypted))...); e != nil {
		return nil, e
	}
	vols, e := h.cloud.CopyVolumes(in)
	if e != nil {
		return nil, e
	}
	out := &volumeSetResponse{}
	for _, v := range vols {
		out.Volumes.Items = append(out.Volumes.Items, h.volumeOut(v))
	}
	return out, nil
}

func (h *handler) deleteVolume(p params) (requestIDSetter, error) {
	id, err := required(p, "VolumeId")
	if err != nil {
		return nil, err
	}
	dry, err := p.boolv("DryRun")
	if err != nil {
		return nil, err
	}
	if err := h.cloud.DeleteVolume(id, dry); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}

// required reads a parameter EC2 requires.
func required(p params, name string) (string, error) {
	v := p.str(name)
	if v == "" {
		return "", model.Errorf(model.CodeMissingParameter, "The request must contain the parameter %s", name)
	}
	return v, nil
}

func (h *handler) describeVolumes(p params) (requestIDSetter, error) {
	q, err := h.describeQuery(p, "VolumeId")
	if err != nil {
		return nil, err
	}
	page, err := h.cloud.DescribeVolumes(q)
	if err != nil {
		return nil, err
	}
	out := &volumeSetResponse{NextToken: page.NextToken}
	for _, v := range page.Items {
		out.Volumes.Items = append(out.Volumes.Items, h.volumeOut(v))
	}
	return out, nil
}

func (h *handler) attachVolume(p params) (requestIDSetter, error) {
	var in model.AttachVolumeInput
	var err error
	if in.VolumeID, err = required(p, "VolumeId"); err != nil {
		return nil, err
	}
	if in.InstanceID, err = required(p, "InstanceId"); err != nil {
		return nil, err
	}
	in.Device = p.str("Device")
	if in.DryRun, err = p.boolv("DryRun"); err != nil {
		return nil, err
	}
	a, err := h.cloud.AttachVolume(in)
	if err != nil {
		return nil, err
	}
	return &attachmentResponse{attachmentXML: attachmentOut(a)}, nil
}

func (h *handler) detachVolume(p params) (requestIDSetter, error) {
	var in model.DetachVolumeInput
	var err error
	if in.VolumeID, err = required(p, "VolumeId"); err != nil {
		return nil, err
	}
	in.InstanceID, in.Device = p.str("InstanceId"), p.str("Device")
	if in.Force, err = p.boolv("Force"); err != nil {
		return nil, err
	}
	if in.DryRun, err = p.boolv("DryRun"); err != nil {
		return nil, err
	}
	a, err := h.cloud.DetachVolume(in)
	if err != nil {
		return nil, err
	}
	return &attachmentResponse{attachmentXML: attachmentOut(a)}, nil
}

func (h *handler) modifyVolume(p params) (requestIDSetter, error) {
	var in model.ModifyVolumeInput
	var err [6]error
	in.VolumeID, err[0] = required(p, "VolumeId")
	in.Type = p.str("VolumeType")
	var size *int32
	size, err[1] = p.int32p("Size")
	in.Iops, err[2] = p.int32p("Iops")
	in.Throughput, err[3] = p.int32p("Throughput")
	in.MultiAttach, err[4] = p.boolp("MultiAttachEnabled")
	in.DryRun, err[5] = p.boolv("DryRun")
	if e := firstErr(err[:]...); e != nil {
		return nil, e
	}
	// A size given is a target size, within the type's range like any
	// other; only an absent one keeps the volume's.
	if size != nil {
		if *size < 1 {
			return nil, model.Errorf(model.CodeInvalidParameterValue, "Volume size (%d) must be at least 1 GiB.", *size)
		}
		in.Size = *size
	}
	m, e := h.cloud.ModifyVolume(in)
	if e != nil {
		return nil, e
	}
	return &modifyVolumeResponse{Modification: modificationOut(m)}, nil
}

func (h *handler) describeVolumesModifications(p params) (requestIDSetter, error) {
	q, err := h.describeQuery(p, "VolumeId")
	if err != nil {
		return nil, err
	}
	page, err := h.cloud.DescribeVolumesModifications(q)
	if err != nil {
		return nil, err
	}
	out := &modificationSetResponse{NextToken: page.NextToken}
	for _, m := range page.Items {
		out.Modifications.Items = append(out.Modifications.Items, modificationOut(m))
	}
	return out, nil
}

func (h *handler) describeVolumeStatus(p params) (requestIDSetter, error) {
	q, err := h.describeQuery(p, "VolumeId")
	if err != nil {
		return nil, err
	}
	page, err := h.cloud.DescribeVolumeStatus(q)
	if err != nil {
		return nil, err
	}
	out := &volumeStatusResponse{NextToken: page.NextToken}
	for _, s := range page.Items {
		out.Statuses.Items = append(out.Statuses.Items, volumeStatusOut(s))
	}
	return out, nil
}
