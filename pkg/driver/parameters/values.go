package parameters

import (
	"strconv"
	"strings"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// volumeTypes are the EBS volume types a user may ask for.
var volumeTypes = []cloud.VolumeType{
	cloud.VolumeTypeGP3, cloud.VolumeTypeGP2, cloud.VolumeTypeIO1, cloud.VolumeTypeIO2,
	cloud.VolumeTypeST1, cloud.VolumeTypeSC1, cloud.VolumeTypeStandard,
}

// DefaultVolumeType is the type of a volume whose StorageClass names none.
const DefaultVolumeType = cloud.VolumeTypeGP3

// parseVolumeType accepts a volume type in any letter case.
func parseVolumeType(key, value string) (cloud.VolumeType, error) {
	t := cloud.VolumeType(strings.ToLower(strings.TrimSpace(value)))
	for _, known := range volumeTypes {
		if t == known {
			return t, nil
		}
	}
	return "", invalid(key, "unknown volume type %q (want gp3, gp2, io1, io2, st1, sc1 or standard)", value)
}

// parsePositive reads a whole number between 1 and 2147483647.
func parsePositive(key, value string) (int32, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 32)
	if err != nil || n <= 0 {
		return 0, invalid(key, "must be a whole number from 1 to 2147483647, not %q", value)
	}
	return int32(n), nil
}

// parseBool reads "true" or "false" in any letter case.
func parseBool(key, value string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(value)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, invalid(key, "must be true or false, not %q", value)
}

// takesIOPS reports whether a volume type has provisioned IOPS.
func takesIOPS(t cloud.VolumeType) bool {
	return t == cloud.VolumeTypeGP3 || t == cloud.VolumeTypeIO1 || t == cloud.VolumeTypeIO2
}

// takesThroughput reports whether a volume type has provisioned throughput.
func takesThroughput(t cloud.VolumeType) bool { return t == cloud.VolumeTypeGP3 }

// checkPerformance refuses IOPS or throughput for a type that has none, so
// the user learns it from the claim's events instead of from a cloud error.
// Keys name the parameters as the user wrote them (empty when not given).
func checkPerformance(t cloud.VolumeType, iopsKey string, iops int32, perGBKey string, perGB int32, throughputKey string, throughput int32) error {
	if iops > 0 && !takesIOPS(t) {
		return invalid(iopsKey, "volume type %s has no provisioned IOPS (only gp3, io1 and io2 do)", t)
	}
	if perGB > 0 && !takesIOPS(t) {
		return invalid(perGBKey, "volume type %s has no provisioned IOPS (only gp3, io1 and io2 do)", t)
	}
	if iops > 0 && perGB > 0 {
		return invalid(perGBKey, "cannot be combined with %q: give one or the other", iopsKey)
	}
	if throughput > 0 && !takesThroughput(t) {
		return invalid(throughputKey, "volume type %s has no provisioned throughput (only gp3 does)", t)
	}
	return nil
}
