package winhost

import (
	"errors"
	"slices"

	"k8s.io/klog/v2"
)

// ErrInjected is the error of an operation a Fault struck.
var ErrInjected = errors.New("fault injected by the emulated host")

// Fault is a misbehaviour of the host that a test, or the csi-proxy
// emulator's admin API, arms for the next call of one operation. Real hosts
// misbehave this way: a call fails, or it times out after Windows did the
// work (a quick format of a large volume, say), so the caller cannot tell
// whether it happened.
type Fault struct {
	// Op is the operation it strikes, by the name of the Host method
	// (InitializeDisk, CreateBasicPartition, FormatVolume, MountVolume,
	// SetDiskState, ...); the csi-proxy v2 library and the v1 servers call
	// them.
	Op string `json:"op"`
	// After makes the operation happen and then answer an error; without
	// it the operation fails and nothing happens.
	After bool `json:"after,omitempty"`
}

// faults are the armed faults and the partitions whose volumes arrive
// late.
type faults struct {
	next []Fault
	// lateListings is how many listings of a disk's volumes the volume of
	// each partition created from now on is missing from.
	lateListings int
	// hidden counts down, by Windows volume ID, the listings a new volume
	// is still missing from.
	hidden map[string]int
}

// FailNext arms f: the next call of f.Op fails. Faults for one operation
// strike in the order they were armed.
func (h *Host) FailNext(f Fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults.next = append(h.faults.next, f)
	klog.V(2).InfoS("Fault armed", "op", f.Op, "after", f.After)
}

// DelayNewVolumes makes the volume of every partition created from now on
// missing from the next listings listings of its disk's volumes, as
// Windows' mount manager announces a new partition's volume a moment after
// the partition is made; 0 makes them appear at once again.
func (h *Host) DelayNewVolumes(listings int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults.lateListings = listings
}

// takeFault returns the first fault armed for op, disarming it. The caller
// holds h.mu.
func (h *Host) takeFault(op string) (Fault, bool) {
	i := slices.IndexFunc(h.faults.next, func(f Fault) bool { return f.Op == op })
	if i < 0 {
		return Fault{}, false
	}
	f := h.faults.next[i]
	h.faults.next = slices.Delete(h.faults.next, i, i+1)
	klog.V(2).InfoS("Fault strikes", "op", op, "after", f.After)
	return f, true
}

// hideNew hides a newly created volume for the configured listings. The
// caller holds h.mu.
func (h *Host) hideNew(volumeID string) {
	if h.faults.lateListings <= 0 {
		return
	}
	if h.faults.hidden == nil {
		h.faults.hidden = map[string]int{}
	}
	h.faults.hidden[volumeID] = h.faults.lateListings
}

// stillHidden reports whether a listing must leave the volume out, and
// counts the listing. The caller holds h.mu.
func (h *Host) stillHidden(volumeID string) bool {
	n := h.faults.hidden[volumeID]
	if n <= 0 {
		return false
	}
	h.faults.hidden[volumeID] = n - 1
	return true
}
