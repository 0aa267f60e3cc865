package limits

// The data below restates AWS's "Amazon EBS volume limits for Amazon EC2
// instances" page (docs.aws.amazon.com/ebs/latest/userguide/volume_limits.html
// and its predecessor in the EC2 User Guide). Where AWS gives a number of EBS
// volumes "with one network interface", the slot count here is that number
// plus the interface (and plus the type's NVMe instance store volumes), so
// that Limit.Available subtracts every interface and instance store volume
// the node actually has. When AWS adds instance types, add them here and to
// table_test.go.

// sharedSlots is the pool most Nitro instances share between EBS volumes,
// network interfaces and NVMe instance store volumes.
const sharedSlots = 28

// xenSlots is the most block devices a Xen-based instance should have: AWS
// warns that more than 40 (root volume included) can keep it from booting.
const xenSlots = 40

// bareMetalSlots: AWS lists 31 EBS volumes for most bare metal instances.
const bareMetalSlots = 31 + 1

// highMemoryMetalSlots: AWS lists 19 EBS volumes for the u-*.metal high
// memory instances. (Their virtualized sizes have the common 27.)
const highMemoryMetalSlots = 19 + 1

// dedicatedFamilies are the Nitro families AWS lists with a dedicated EBS
// limit that depends only on the instance size.
var dedicatedFamilies = map[string]bool{
	// General purpose.
	"m7a": true, "m7i": true, "m7i-flex": true, "m8g": true,
	// Compute optimized.
	"c7a": true, "c7i": true, "c7i-flex": true, "c8g": true,
	// Memory optimized.
	"r7a": true, "r7i": true, "r7iz": true, "r8g": true, "x8g": true,
	"u7i-6tb": true, "u7i-8tb": true, "u7i-12tb": true,
	"u7in-16tb": true, "u7in-24tb": true, "u7in-32tb": true, "u7inh-32tb": true,
	// Storage optimized.
	"i7ie": true, "i8g": true,
	// Accelerated computing.
	"f2": true, "g6": true, "g6e": true, "gr6": true,
	"p5": true, "p5e": true, "p5en": true, "trn2": true, "trn2u": true,
}

// dedicatedBySize is AWS's size table for the dedicated families: every
// size from medium to 12xlarge gets 32 volumes, 16xlarge 48, 24xlarge 64,
// 32xlarge 88 and 48xlarge 128.
var dedicatedBySize = []struct {
	minSize int // the N of "Nxlarge"; rows are in ascending order
	slots   int
}{
	{minSize: 1, slots: 32},
	{minSize: 16, slots: 48},
	{minSize: 24, slots: 64},
	{minSize: 32, slots: 88},
	{minSize: 48, slots: 128},
}

// The metal sizes of the dedicated families: metal-16xl and metal-24xl get
// 39 volumes, metal-32xl and metal-48xl 79.
const (
	dedicatedSmallMetalMaxSize = 24
	dedicatedSmallMetalSlots   = 39
	dedicatedLargeMetalSlots   = 79
)

// xenFamilies are the instance families built on the Xen hypervisor.
var xenFamilies = map[string]bool{
	"c1": true, "c3": true, "c4": true, "cc2": true, "cg1": true, "cr1": true,
	"d2": true, "f1": true, "g2": true, "g3": true, "g3s": true,
	"h1": true, "hi1": true, "hs1": true, "i2": true, "i3": true,
	"m1": true, "m2": true, "m3": true, "m4": true,
	"p2": true, "p3": true, "r3": true, "r4": true,
	"t1": true, "t2": true, "x1": true, "x1e": true,
}

// nitroExceptions are sizes of Xen families that run on Nitro.
var nitroExceptions = map[string]bool{
	"i3.metal": true,
}

// typeLimits are single instance types whose limit differs from their
// family's rule.
var typeLimits = map[string]Limit{
	// Accelerators take slots from the shared pool: AWS lists 26 EBS volumes
	// for inf1.xlarge and inf1.2xlarge, 23 for inf1.6xlarge, 11 for
	// inf1.24xlarge, and 9 for g5.48xlarge (which also has two NVMe instance
	// store volumes), each with one network interface.
	"inf1.xlarge":   {Slots: 26 + 1, Kind: Shared},
	"inf1.2xlarge":  {Slots: 26 + 1, Kind: Shared},
	"inf1.6xlarge":  {Slots: 23 + 1, Kind: Shared},
	"inf1.24xlarge": {Slots: 11 + 1, Kind: Shared},
	"g5.48xlarge":   {Slots: 9 + 1 + 2, Kind: Shared},
	// Mac instances: 16 EBS volumes on mac1.metal; EC2 reports 10 for the
	// mac2 sizes.
	"mac1.metal":         {Slots: 16 + 1, Kind: Shared},
	"mac2.metal":         {Slots: 10 + 1, Kind: Shared},
	"mac2-m1ultra.metal": {Slots: 10 + 1, Kind: Shared},
	"mac2-m2.metal":      {Slots: 10 + 1, Kind: Shared},
	"mac2-m2pro.metal":   {Slots: 10 + 1, Kind: Shared},
	// Dedicated types that EC2's DescribeInstanceTypes reports below the size
	// table; the lower number wins.
	"p5.48xlarge":    {Slots: 64, Kind: Dedicated},
	"p5e.48xlarge":   {Slots: 64, Kind: Dedicated},
	"p5en.48xlarge":  {Slots: 64, Kind: Dedicated},
	"trn2.48xlarge":  {Slots: 64, Kind: Dedicated},
	"trn2u.48xlarge": {Slots: 64, Kind: Dedicated},
	"hpc7a.12xlarge": {Slots: 27, Kind: Dedicated},
	"hpc7a.24xlarge": {Slots: 27, Kind: Dedicated},
	"hpc7a.48xlarge": {Slots: 27, Kind: Dedicated},
	"hpc7a.96xlarge": {Slots: 27, Kind: Dedicated},
}
