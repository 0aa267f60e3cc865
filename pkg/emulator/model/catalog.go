package model

import (
	"fmt"
	"sort"
	"strings"
)

// AttachmentLimitType says whether an instance type's EBS attachment slots
// are shared with network interfaces and NVMe instance-store volumes
// ("shared", most Nitro types) or reserved for EBS ("dedicated", the 7th
// generation types EC2 lists), as DescribeInstanceTypes reports it.
type AttachmentLimitType string

// The attachment limit types EC2 reports; Xen types report none.
const (
	LimitShared    AttachmentLimitType = "shared"
	LimitDedicated AttachmentLimitType = "dedicated"
)

// InstanceType is what the emulated cloud knows about one instance type: the
// facts that decide how many volumes fit and how they appear on the host.
type InstanceType struct {
	Name string
	// Hypervisor is "nitro" or "xen".
	Hypervisor string
	// MaxAttachments is MaximumEbsAttachments: for shared types the slots
	// that EBS volumes, network interfaces and NVMe instance-store volumes
	// share; for dedicated types the EBS-only limit; for Xen types the
	// documented practical limit of 39 EBS volumes.
	MaxAttachments int
	// LimitType is empty for Xen types.
	LimitType AttachmentLimitType
	// MaxNetworkInterfaces is the ENI limit of the type.
	MaxNetworkInterfaces int
	// InstanceStoreNVMe is the number of NVMe instance-store disks; on shared
	// types each takes an attachment slot.
	InstanceStoreNVMe int
	// InstanceStoreGB is the size of each instance-store disk.
	InstanceStoreGB int64
	VCPUs           int32
	MemoryMiB       int64
}

// Nitro reports whether the type runs on the Nitro hypervisor, where EBS
// volumes appear as NVMe devices and multi-attach is possible.
func (t InstanceType) Nitro() bool { return t.Hypervisor == "nitro" }

// instanceTypes is the small catalogue the emulator offers: enough shared,
// dedicated and Xen types to exercise every attachment-limit rule. Limits
// follow EC2's "Amazon EBS volume limits for Amazon EC2 instances" page.
var instanceTypes = map[string]InstanceType{
	"t2.medium":  {Name: "t2.medium", Hypervisor: "xen", MaxAttachments: 39, MaxNetworkInterfaces: 3, VCPUs: 2, MemoryMiB: 4096},
	"t3.medium":  {Name: "t3.medium", Hypervisor: "nitro", MaxAttachments: 28, LimitType: LimitShared, MaxNetworkInterfaces: 3, VCPUs: 2, MemoryMiB: 4096},
	"c5.large":   {Name: "c5.large", Hypervisor: "nitro", MaxAttachments: 28, LimitType: LimitShared, MaxNetworkInterfaces: 3, VCPUs: 2, MemoryMiB: 4096},
	"m5.large":   {Name: "m5.large", Hypervisor: "nitro", MaxAttachments: 28, LimitType: LimitShared, MaxNetworkInterfaces: 3, VCPUs: 2, MemoryMiB: 8192},
	"m5.xlarge":  {Name: "m5.xlarge", Hypervisor: "nitro", MaxAttachments: 28, LimitType: LimitShared, MaxNetworkInterfaces: 4, VCPUs: 4, MemoryMiB: 16384},
	"m5d.large":  {Name: "m5d.large", Hypervisor: "nitro", MaxAttachments: 28, LimitType: LimitShared, MaxNetworkInterfaces: 3, InstanceStoreNVMe: 1, InstanceStoreGB: 75, VCPUs: 2, MemoryMiB: 8192},
	"m6i.large":  {Name: "m6i.large", Hypervisor: "nitro", MaxAttachments: 28, LimitType: LimitShared, MaxNetworkInterfaces: 3, VCPUs: 2, MemoryMiB: 8192},
	"m7i.large":  {Name: "m7i.large", Hypervisor: "nitro", MaxAttachments: 32, LimitType: LimitDedicated, MaxNetworkInterfaces: 3, VCPUs: 2, MemoryMiB: 8192},
	"m7i.xlarge": {Name: "m7i.xlarge", Hypervisor: "nitro", MaxAttachments: 32, LimitType: LimitDedicated, MaxNetworkInterfaces: 4, VCPUs: 4, MemoryMiB: 16384},
	// A large node, for benchmarks that attach many volumes to one instance.
	"m7i.48xlarge": {Name: "m7i.48xlarge", Hypervisor: "nitro", MaxAttachments: 128, LimitType: LimitDedicated, MaxNetworkInterfaces: 15, VCPUs: 192, MemoryMiB: 786432},
}

// LookupInstanceType returns the catalogue entry for name.
func LookupInstanceType(name string) (InstanceType, bool) {
	t, ok := instanceTypes[name]
	return t, ok
}

// InstanceTypeNames lists the catalogue, sorted, for help texts and errors.
func InstanceTypeNames() []string {
	names := make([]string, 0, len(instanceTypes))
	for n := range instanceTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Zone is one availability zone of the emulated region.
type Zone struct {
	// Name is the zone name, e.g. us-east-1a.
	Name string `json:"name"`
	// ID is the zone ID, e.g. use1-az1; zone IDs name the same physical zone
	// in every account, which is why the driver can provision by them.
	ID string `json:"id"`
}

// DefaultRegion is the region the emulator plays unless told otherwise.
const DefaultRegion = "us-east-1"

// DefaultZones returns three zones for region: <region>a, b and c, with zone
// IDs <short region>-az1, -az2 and -az4 (us-east-1 → use1-az1 …).
func DefaultZones(region string) []Zone {
	short := shortRegion(region)
	return []Zone{
		{Name: region + "a", ID: short + "-az1"},
		{Name: region + "b", ID: short + "-az2"},
		{Name: region + "c", ID: short + "-az4"},
	}
}

// shortRegion abbreviates a region name the way EC2 zone IDs do for the
// common cases: the first part, the first letter of each direction word,
// and the number (us-east-1 → use1, eu-west-2 → euw2, ap-southeast-1 → apse1).
func shortRegion(region string) string {
	parts := strings.Split(region, "-")
	if len(parts) < 3 {
		return region
	}
	var b strings.Builder
	b.WriteString(parts[0])
	for _, p := range parts[1 : len(parts)-1] {
		for _, dir := range []string{"north", "south", "east", "west", "central"} {
			if strings.Contains(p, dir) {
				b.WriteByte(dir[0])
			}
		}
	}
	b.WriteString(parts[len(parts)-1])
	return b.String()
}

// ParseZones reads a zone list "name=id,name=id" (for the --zones flag).
func ParseZones(s string) ([]Zone, error) {
	var zones []Zone
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, id, ok := strings.Cut(item, "=")
		if !ok || name == "" || id == "" {
			return nil, fmt.Errorf("zone %q: want name=id, e.g. us-east-1a=use1-az1", item)
		}
		zones = append(zones, Zone{Name: name, ID: id})
	}
	if len(zones) == 0 {
		return nil, fmt.Errorf("no zones in %q", s)
	}
	return zones, nil
}
