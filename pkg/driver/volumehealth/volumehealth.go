// Package volumehealth turns Diskplane's health findings into the two ways
// CSI has carried volume health, so that every CO in use can read them:
//
//   - CSI 1.13's health RPCs (ControllerGetVolumeHealth,
//     ControllerListVolumeHealth, NodeGetVolumeHealth): a VolumeHealth with
//     one entry per finding, its kind and CamelCase reason.
//   - The volume condition of CSI 1.3 to 1.12 (VOLUME_CONDITION): an
//     abnormal flag and a message in ListVolumes, ControllerGetVolume and
//     NodeGetVolumeStats. CSI 1.13 removed it from its protobuf (the field
//     numbers and capability values are reserved there), but the COs in use
//     still read it: the kubelet (CSIVolumeHealth, built on CSI 1.9 up to
//     Kubernetes 1.35 at least) and external-health-monitor (v0.18, CSI
//     1.12). This package writes those fields by their numbers, exactly as
//     a plugin built on CSI 1.12 puts them on the wire.
package volumehealth

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/diskplane/diskplane/pkg/health"
)

// The capability values of VOLUME_CONDITION in CSI 1.3 to 1.12 (reserved in
// 1.13's enums; csi-test knows them as deprecated capabilities).
const (
	ControllerVolumeCondition = csi.ControllerServiceCapability_RPC_Type(11)
	NodeVolumeCondition       = csi.NodeServiceCapability_RPC_Type(4)
)

// Field numbers of the volume condition: field 2 of NodeGetVolumeStatsResponse,
// ListVolumesResponse.VolumeStatus and ControllerGetVolumeResponse.VolumeStatus
// holds a VolumeCondition, whose field 1 is abnormal and field 2 message.
const (
	conditionField       protowire.Number = 2
	conditionAbnormalNum protowire.Number = 1
	conditionMessageNum  protowire.Number = 2
)

// VolumeHealth is the CSI 1.13 answer for a volume: one entry per finding;
// none when it is healthy.
func VolumeHealth(volumeID string, r health.Report) *csi.VolumeHealth {
	out := &csi.VolumeHealth{VolumeId: volumeID}
	for _, f := range r.Findings {
		out.HealthStatuses = append(out.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
			Status: errorType(f.Kind), Reason: f.Reason, Message: f.Message,
		})
	}
	return out
}

func errorType(k health.Kind) csi.VolumeHealthErrorType {
	switch k {
	case health.Degraded:
		return csi.VolumeHealthErrorType_DEGRADED
	case health.Inaccessible:
		return csi.VolumeHealthErrorType_INACCESSIBLE
	case health.DataLoss:
		return csi.VolumeHealthErrorType_DATA_LOSS
	}
	return csi.VolumeHealthErrorType_UNKNOWN_VOLUME_HEALTH_TYPE
}

// SetCondition puts the report into m as the volume condition of CSI 1.12:
// m is a NodeGetVolumeStatsResponse, a ListVolumesResponse_VolumeStatus or
// a ControllerGetVolumeResponse_VolumeStatus. A condition set before is
// replaced.
func SetCondition(m proto.Message, r health.Report) {
	var cond []byte
	cond = protowire.AppendTag(cond, conditionAbnormalNum, protowire.VarintType)
	cond = protowire.AppendVarint(cond, protowire.EncodeBool(r.Abnormal()))
	cond = protowire.AppendTag(cond, conditionMessageNum, protowire.BytesType)
	cond = protowire.AppendString(cond, r.Message())

	refl := m.ProtoReflect()
	unknown := withoutField(refl.GetUnknown(), conditionField)
	unknown = protowire.AppendTag(unknown, conditionField, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, cond)
	refl.SetUnknown(unknown)
}

// Condition reads the volume condition SetCondition wrote (ok is false when
// m carries none), as a CO built on CSI 1.12 reads it. Diskplane's tests
// and tools that speak CSI 1.13 use it.
func Condition(m proto.Message) (abnormal bool, message string, ok bool) {
	raw := m.ProtoReflect().GetUnknown()
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return false, "", false
		}
		raw = raw[n:]
		if num != conditionField || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, raw); n < 0 {
				return false, "", false
			}
			raw = raw[n:]
			continue
		}
		cond, n := protowire.ConsumeBytes(raw)
		if n < 0 {
			return false, "", false
		}
		raw = raw[n:]
		abnormal, message, ok = parseCondition(cond)
	}
	return abnormal, message, ok
}

// parseCondition decodes a VolumeCondition message.
func parseCondition(b []byte) (abnormal bool, message string, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, "", false
		}
		b = b[n:]
		switch {
		case num == conditionAbnormalNum && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false, "", false
			}
			abnormal, b = protowire.DecodeBool(v), b[n:]
		case num == conditionMessageNum && typ == protowire.BytesType:
			s, n := protowire.ConsumeString(b)
			if n < 0 {
				return false, "", false
			}
			message, b = s, b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false, "", false
			}
			b = b[n:]
		}
	}
	return abnormal, message, true
}

// withoutField returns raw (encoded unknown fields) without the fields
// numbered num.
func withoutField(raw []byte, num protowire.Number) []byte {
	var out []byte
	for len(raw) > 0 {
		n, typ, tagLen := protowire.ConsumeTag(raw)
		if tagLen < 0 {
			return out
		}
		valLen := protowire.ConsumeFieldValue(n, typ, raw[tagLen:])
		if valLen < 0 {
			return out
		}
		if n != num {
			out = append(out, raw[:tagLen+valLen]...)
		}
		raw = raw[tagLen+valLen:]
	}
	return out
}
