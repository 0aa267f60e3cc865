package cloud

import "fmt"

// iopsLimits are one volume type's provisioned-IOPS bounds, as EC2 documents
// them for CreateVolume.
type iopsLimits struct {
	min, max int32
	// maxPerGiB is the highest IOPS-to-size ratio EC2 accepts.
	maxPerGiB int32
}

// provisionedIOPS lists the volume types that take an IOPS parameter. The
// others (gp2, st1, sc1, standard) derive their performance from size alone
// and refuse one.
var provisionedIOPS = map[VolumeType]iopsLimits{
	VolumeTypeGP3: {min: 3000, max: 80000, maxPerGiB: 500},
	VolumeTypeIO1: {min: 100, max: 64000, maxPerGiB: 50},
	VolumeTypeIO2: {min: 100, max: 256000, maxPerGiB: 1000},
}

// DefaultVolumeType is the type of a volume created without one.
const DefaultVolumeType = VolumeTypeGP3

// volumeIOPS works out the IOPS to ask EC2 for: the explicit IOPS capped to
// the type's maximum, or IOPS per GiB times the size, capped to what EC2
// accepts for that size and raised to the type's minimum when the caller
// allows it. Zero means "leave it to EC2" (the type's default). Requests EC2
// would refuse anyway are refused here with ErrInvalidArgument, before any
// call, so the message can say what to change.
func volumeIOPS(opts *CreateVolumeOptions) (int32, error) {
	volType := opts.Type
	if volType == "" {
		volType = DefaultVolumeType
	}
	if opts.IOPS == 0 && opts.IOPSPerGiB == 0 {
		return 0, nil
	}
	if opts.IOPS != 0 && opts.IOPSPerGiB != 0 {
		return 0, fmt.Errorf("IOPS (%d) and IOPS per GiB (%d) are mutually exclusive: %w", opts.IOPS, opts.IOPSPerGiB, ErrInvalidArgument)
	}
	if opts.IOPS < 0 || opts.IOPSPerGiB < 0 {
		return 0, fmt.Errorf("IOPS must not be negative: %w", ErrInvalidArgument)
	}
	limits, ok := provisionedIOPS[volType]
	if !ok {
		return 0, fmt.Errorf("volume type %s does not take provisioned IOPS: %w", volType, ErrInvalidArgument)
	}
	if opts.IOPS != 0 {
		return min(opts.IOPS, limits.max), nil
	}
	if opts.SizeGiB <= 0 {
		return 0, fmt.Errorf("IOPS per GiB needs the volume size: %w", ErrInvalidArgument)
	}
	perGiB := int64(opts.IOPSPerGiB)
	want := perGiB * int64(opts.SizeGiB)
	capped := min(want, int64(limits.max), int64(limits.maxPerGiB)*int64(opts.SizeGiB))
	if capped >= int64(limits.min) {
		return int32(capped), nil
	}
	if opts.AllowIOPSPerGiBIncrease {
		return limits.min, nil
	}
	return 0, fmt.Errorf("%d IOPS per GiB × %d GiB = %d IOPS is below the %s minimum of %d (allow the increase, or ask for more IOPS per GiB): %w",
		opts.IOPSPerGiB, opts.SizeGiB, capped, volType, limits.min, ErrInvalidArgument)
}
