package controller

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// GiB is the unit EBS sizes volumes in.
const GiB int64 = 1 << 30

// DefaultVolumeSizeGiB is the size of a volume whose request gives no
// capacity range (raised to the type's minimum where that is larger).
const DefaultVolumeSizeGiB = 100

// sizeLimits are EBS's size range per volume type, in GiB, as the EC2
// CreateVolume reference gives them.
var sizeLimits = map[cloud.VolumeType]struct{ min, max int64 }{
	cloud.VolumeTypeGP2:      {1, 16384},
	cloud.VolumeTypeGP3:      {1, 65536},
	cloud.VolumeTypeIO1:      {4, 16384},
	cloud.VolumeTypeIO2:      {4, 65536},
	cloud.VolumeTypeST1:      {125, 16384},
	cloud.VolumeTypeSC1:      {125, 16384},
	cloud.VolumeTypeStandard: {1, 1024},
}

// volumeSize picks the size in GiB of a new volume: the request's
// required_bytes rounded up to whole GiB (or the default when no range is
// given), at least minGiB (the type's minimum, a source snapshot's or
// volume's size), never above limit_bytes or the type's maximum. A range
// that cannot be met is OutOfRange; a malformed one InvalidArgument.
func volumeSize(r *csi.CapacityRange, t cloud.VolumeType, sourceGiB int64) (int32, error) {
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if required < 0 || limit < 0 {
		return 0, invalidArgument("capacity range must not be negative (required %d, limit %d bytes)", required, limit)
	}
	if limit > 0 && required > limit {
		return 0, invalidArgument("required capacity %d bytes is more than the limit %d bytes", required, limit)
	}
	bounds := sizeLimits[t]
	size := ceilGiB(required)
	if required == 0 {
		size = max(DefaultVolumeSizeGiB, bounds.min)
		if limit > 0 {
			size = min(size, limit/GiB)
		}
	}
	size = max(size, bounds.min, sourceGiB)
	switch {
	case limit > 0 && size*GiB > limit:
		if size == ceilGiB(required) {
			return 0, status.Errorf(codes.OutOfRange, "no whole number of GiB fits between %d and %d bytes: EBS sizes volumes in GiB", required, limit)
		}
		return 0, status.Errorf(codes.OutOfRange, "the volume needs at least %d GiB (type %s minimum or the source's size), more than the limit of %d bytes", size, t, limit)
	case size > bounds.max:
		return 0, status.Errorf(codes.OutOfRange, "%d GiB is more than the %d GiB maximum of volume type %s", size, bounds.max, t)
	}
	return int32(size), nil
}

// ceilGiB rounds bytes up to whole GiB.
func ceilGiB(bytes int64) int64 {
	n := bytes / GiB
	if bytes%GiB != 0 {
		n++
	}
	return n
}

// fitsRange reports whether an existing volume's size satisfies a capacity range.
func fitsRange(sizeGiB int32, r *csi.CapacityRange) bool {
	bytes := int64(sizeGiB) * GiB
	return bytes >= r.GetRequiredBytes() && (r.GetLimitBytes() == 0 || bytes <= r.GetLimitBytes())
}
