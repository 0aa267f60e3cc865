package model

// volumeTypeRules are EC2's limits for one volume type, from the CreateVolume
// and ModifyVolume API reference.
type volumeTypeRules struct {
	minSize, maxSize int32
	// iops: whether it may be given, whether it must be, its range and the
	// highest IOPS per GiB of size. baseIops is the IOPS every volume of the
	// type may have whatever its size (gp3's 3,000).
	iopsAllowed, iopsRequired bool
	minIops, maxIops          int32
	maxIopsPerGiB             int32
	baseIops                  int32
	// throughput (MiB/s): gp3 only, with a baseline any volume may have and a
	// ceiling of a quarter MiB/s per provisioned IOPS above it.
	throughputAllowed bool
	minThroughput     int32
	maxThroughput     int32
	multiAttach       bool
}

// volumeRules holds every volume type EC2 offers.
var volumeRules = map[string]volumeTypeRules{
	"gp2": {minSize: 1, maxSize: 16384},
	"gp3": {minSize: 1, maxSize: 65536, iopsAllowed: true, minIops: 3000, maxIops: 80000, maxIopsPerGiB: 500, baseIops: 3000,
		throughputAllowed: true, minThroughput: 125, maxThroughput: 2000},
	"io1":      {minSize: 4, maxSize: 16384, iopsAllowed: true, iopsRequired: true, minIops: 100, maxIops: 64000, maxIopsPerGiB: 50, multiAttach: true},
	"io2":      {minSize: 4, maxSize: 65536, iopsAllowed: true, iopsRequired: true, minIops: 100, maxIops: 256000, maxIopsPerGiB: 1000, multiAttach: true},
	"st1":      {minSize: 125, maxSize: 16384},
	"sc1":      {minSize: 125, maxSize: 16384},
	"standard": {minSize: 1, maxSize: 1024},
}

// DefaultVolumeType is what CreateVolume makes when no type is given.
const DefaultVolumeType = "gp2"

// gp3 defaults and gp2's size-derived IOPS.
const (
	gp3DefaultIops        = 3000
	gp3DefaultThroughput  = 125
	modifyDefaultIops     = 3000
	gp2IopsPerGiB         = 3
	gp2MinIops            = 100
	gp2MaxIops            = 16000
	maxThroughputPerIops  = 0.25
	multiAttachMaxTargets = 16
)

// gp2Iops is the baseline IOPS EC2 reports for a gp2 volume of size GiB.
func gp2Iops(size int32) int32 {
	return min(max(size*gp2IopsPerGiB, gp2MinIops), gp2MaxIops)
}

// requestedSettings are the volume parameters a request names; nil means not
// given.
type requestedSettings struct {
	Type        string
	Size        int32
	Iops        *int32
	Throughput  *int32
	MultiAttach *bool
}

func rulesFor(volumeType string) (volumeTypeRules, *Error) {
	r, ok := volumeRules[volumeType]
	if !ok {
		return r, Errorf(CodeUnknownVolumeType, "The specified volume type (%s) is unsupported. The supported volume types are gp2, gp3, io1, io2, st1, sc1, and standard.", volumeType)
	}
	return r, nil
}

// createSettings checks a new volume's parameters and fills in EC2's
// defaults (the request's Type is already defaulted).
func createSettings(req requestedSettings) (VolumeSettings, *Error) {
	r, err := rulesFor(req.Type)
	if err != nil {
		return VolumeSettings{}, err
	}
	if e := checkAllowed(req, req.Type, r); e != nil {
		return VolumeSettings{}, e
	}
	s := VolumeSettings{Type: req.Type, Size: req.Size, MultiAttach: req.MultiAttach != nil && *req.MultiAttach}
	switch {
	case req.Iops != nil:
		s.Iops = *req.Iops
	case r.iopsRequired:
		return s, Errorf(CodeInvalidParameterCombination, "The parameter iops must be specified for %s volumes.", req.Type)
	case req.Type == "gp3":
		s.Iops = gp3DefaultIops
	}
	if req.Throughput != nil {
		s.Throughput = *req.Throughput
	} else if r.throughputAllowed {
		s.Throughput = gp3DefaultThroughput
	}
	return s, checkSettings(s, r)
}

// modifySettings computes the target of a modification from the volume's
// current settings and the request, with EC2's defaults for a type change.
func modifySettings(cur VolumeSettings, req requestedSettings) (VolumeSettings, *Error) {
	t := cur
	if req.Type != "" {
		t.Type = req.Type
	}
	r, err := rulesFor(t.Type)
	if err != nil {
		return t, err
	}
	if e := checkAllowed(req, t.Type, r); e != nil {
		return t, e
	}
	if req.Size != 0 {
		if req.Size < cur.Size {
			return t, Errorf(CodeInvalidParameterValue, "New size (%d) cannot be smaller than existing size (%d).", req.Size, cur.Size)
		}
		t.Size = req.Size
	}
	sameType := t.Type == cur.Type
	switch {
	case req.Iops != nil:
		t.Iops = *req.Iops
	case !r.iopsAllowed:
		t.Iops = 0
	case !sameType:
		t.Iops = modifyDefaultIops
	}
	switch {
	case req.Throughput != nil:
		t.Throughput = *req.Throughput
	case !r.throughputAllowed:
		t.Throughput = 0
	case !sameType:
		t.Throughput = gp3DefaultThroughput
	}
	if req.MultiAttach != nil {
		t.MultiAttach = *req.MultiAttach
	}
	if t.MultiAttach && !r.multiAttach {
		return t, Errorf(CodeInvalidParameterCombination, "Multi-Attach is not supported for %s volumes.", t.Type)
	}
	return t, checkSettings(t, r)
}

// checkAllowed rejects parameters the volume type does not take.
func checkAllowed(req requestedSettings, volumeType string, r volumeTypeRules) *Error {
	if req.Iops != nil && !r.iopsAllowed {
		return Errorf(CodeInvalidParameterCombination, "The parameter iops is not supported for %s volumes.", volumeType)
	}
	if req.Throughput != nil && !r.throughputAllowed {
		return Errorf(CodeInvalidParameterCombination, "The parameter throughput is not supported for %s volumes.", volumeType)
	}
	if req.MultiAttach != nil && *req.MultiAttach && !r.multiAttach {
		return Errorf(CodeInvalidParameterCombination, "Multi-Attach is not supported for %s volumes.", volumeType)
	}
	return nil
}

// checkSettings enforces the ranges and ratios of the type's rules.
func checkSettings(s VolumeSettings, r volumeTypeRules) *Error {
	if s.Size < r.minSize {
		return Errorf(CodeInvalidParameterValue, "Volume of %d GiB is too small; minimum is %d GiB for %s volumes.", s.Size, r.minSize, s.Type)
	}
	if s.Size > r.maxSize {
		return Errorf(CodeInvalidParameterValue, "Volume of %d GiB is too large; maximum is %d GiB for %s volumes.", s.Size, r.maxSize, s.Type)
	}
	if r.iopsAllowed {
		if s.Iops < r.minIops {
			return Errorf(CodeInvalidParameterValue, "Volume iops of %d is too low; minimum is %d.", s.Iops, r.minIops)
		}
		if s.Iops > r.maxIops {
			return Errorf(CodeInvalidParameterValue, "Volume iops of %d is too high; maximum is %d.", s.Iops, r.maxIops)
		}
		if s.Iops > r.baseIops && int64(s.Iops) > int64(s.Size)*int64(r.maxIopsPerGiB) {
			return Errorf(CodeInvalidParameterValue, "Iops to volume size ratio of %f is too high; maximum is %d.",
				float64(s.Iops)/float64(s.Size), r.maxIopsPerGiB)
		}
	}
	if r.throughputAllowed {
		if s.Throughput < r.minThroughput {
			return Errorf(CodeInvalidParameterValue, "Throughput of %d MiB/s is too low; minimum is %d MiB/s.", s.Throughput, r.minThroughput)
		}
		if s.Throughput > r.maxThroughput {
			return Errorf(CodeInvalidParameterValue, "Throughput of %d MiB/s is too high; maximum is %d MiB/s.", s.Throughput, r.maxThroughput)
		}
		if s.Throughput > r.minThroughput && float64(s.Throughput) > float64(s.Iops)*maxThroughputPerIops {
			return Errorf(CodeInvalidParameterValue, "Throughput (MiBps) to iops ratio of %f is too high; maximum is %f MiBps per iops.",
				float64(s.Throughput)/float64(s.Iops), maxThroughputPerIops)
		}
	}
	return nil
}

// ReportedIops is the IOPS DescribeVolumes shows: provisioned IOPS for gp3,
// io1 and io2, the size-derived baseline for gp2, nothing for the HDD types.
func (s VolumeSettings) ReportedIops() int32 {
	if s.Type == "gp2" {
		return gp2Iops(s.Size)
	}
	return s.Iops
}
