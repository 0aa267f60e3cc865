// Package limits knows how many EBS volumes an EC2 instance type can hold.
// The node plugin reports that number, less what the instance already uses,
// as its CSI MaxVolumesPerNode, so the Kubernetes scheduler never places a
// pod whose volume cannot be attached. Getting it wrong in either direction
// hurts: too high and pods hang in ContainerCreating on a failed attach, too
// low and nodes sit idle while pods stay Pending. Where the sources are
// unsure, this package errs low; operators can override it with
// --volume-attach-limit.
//
// The numbers come from AWS's "Amazon EBS volume limits for Amazon EC2
// instances" page and are kept as data in table.go.
package limits

import (
	"strconv"
	"strings"
)

// Kind says what shares an instance type's attachment slots.
type Kind string

// The kinds of attachment limit.
const (
	// Shared is most Nitro instance types: EBS volumes, network interfaces
	// and NVMe instance store volumes all take slots from one pool.
	Shared Kind = "shared"
	// Dedicated is the Nitro types whose slots hold EBS volumes only.
	Dedicated Kind = "dedicated"
	// Xen is the older Xen-based types: more than 40 block devices (root,
	// instance store and EBS together) can stop the instance from booting;
	// network interfaces do not count.
	Xen Kind = "xen"
)

// Limit is an instance type's attachment budget.
type Limit struct {
	// Slots is the size of the pool the Kind describes.
	Slots int
	// Kind says what takes slots from the pool.
	Kind Kind
}

// Usage is what already takes attachment slots on an instance, besides the
// volumes the driver attaches.
type Usage struct {
	// Volumes is the EBS volumes the driver does not manage, root volume
	// included.
	Volumes int
	// NetworkInterfaces is the attached network interfaces; every instance
	// has at least one.
	NetworkInterfaces int
	// InstanceStoreVolumes is the instance store volumes present.
	InstanceStoreVolumes int
}

// Available returns how many more volumes the driver may attach: the slots
// left after what u already takes, never less than one. (Zero would tell
// Kubernetes "no limit", the opposite of what a full node needs.)
func (l Limit) Available(u Usage) int {
	left := l.Slots - u.Volumes
	switch l.Kind {
	case Shared:
		left -= max(u.NetworkInterfaces, 1) + u.InstanceStoreVolumes
	case Xen:
		left -= u.InstanceStoreVolumes
	}
	return max(left, 1)
}

// ForInstanceType returns the limit of an instance type such as m5.large.
// Types the table does not know are treated as current-generation Nitro
// types with the common shared limit, since every new type is built on
// Nitro and the shared pool is the smaller one.
func ForInstanceType(instanceType string) Limit {
	t := strings.ToLower(strings.TrimSpace(instanceType))
	if l, ok := typeLimits[t]; ok {
		return l
	}
	family, size, _ := strings.Cut(t, ".")
	if xenFamilies[family] && !nitroExceptions[t] {
		return Limit{Slots: xenSlots, Kind: Xen}
	}
	if dedicatedFamilies[family] {
		if slots, ok := dedicatedSlotsForSize(size); ok {
			return Limit{Slots: slots, Kind: Dedicated}
		}
	}
	if strings.HasPrefix(family, "u-") {
		if size == "metal" {
			return Limit{Slots: highMemoryMetalSlots, Kind: Shared}
		}
		return Limit{Slots: sharedSlots, Kind: Shared}
	}
	if size == "metal" || strings.HasPrefix(size, "metal-") {
		return Limit{Slots: bareMetalSlots, Kind: Shared}
	}
	return Limit{Slots: sharedSlots, Kind: Shared}
}

// dedicatedSlotsForSize reads AWS's size table for the dedicated families:
// an "Nxlarge" size gets the limit of the largest listed size not above it
// (so sizes the table does not list, such as 18xlarge, get the smaller
// neighbour's limit), "medium" and "large" the smallest, and a
// "metal-Nxl" size the metal limit for N.
func dedicatedSlotsForSize(size string) (int, bool) {
	switch size {
	case "medium", "large", "xlarge":
		return dedicatedBySize[0].slots, true
	}
	if n, ok := strings.CutPrefix(size, "metal-"); ok {
		v, err := strconv.Atoi(strings.TrimSuffix(n, "xl"))
		if err != nil || !strings.HasSuffix(n, "xl") {
			return 0, false
		}
		if v <= dedicatedSmallMetalMaxSize {
			return dedicatedSmallMetalSlots, true
		}
		return dedicatedLargeMetalSlots, true
	}
	n, ok := strings.CutSuffix(size, "xlarge")
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(n)
	if err != nil || v < 1 {
		return 0, false
	}
	slots := 0
	for _, row := range dedicatedBySize {
		if v >= row.minSize {
			slots = row.slots
		}
	}
	return slots, true
}
