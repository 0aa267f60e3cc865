package devicenames

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// ErrNoFreeName means every candidate name is in use on the instance, so no
// further volume can be attached to it.
var ErrNoFreeName = errors.New("no free device name on the instance")

// Allocator hands out device names, one namespace per instance. It is safe
// for concurrent use. It keeps no state that matters across restarts: a fresh
// process learns the names in use from DescribeInstances again.
type Allocator struct {
	rejectionTTL time.Duration
	now          func() time.Time

	mu        sync.Mutex
	instances map[string]*instanceNames
}

// instanceNames is what the allocator remembers about one instance.
type instanceNames struct {
	// held maps a canonical name to the attach that holds it.
	held map[string]*holder
	// rejected maps a candidate name to when EC2 last refused it as in use.
	rejected map[string]time.Time
	// next is the index in preferred where the next search starts.
	next int
	// lastUsed is when a name was last acquired or released on the instance.
	lastUsed time.Time
}

// idleTTL is how long the allocator remembers an instance it holds nothing
// for: long enough that the round-robin position survives a detach followed
// by an attach (so the freed name is not handed out again at once), short
// enough that nodes long gone do not pile up in memory.
const idleTTL = time.Hour

// holder is one volume's claim on a name; a second attach of the same volume
// to the same instance shares it.
type holder struct {
	name     string
	volumeID string
	refs     int
}

// NewAllocator returns an allocator that avoids a name EC2 rejected for
// rejectionTTL after the rejection (unless nothing else is free).
func NewAllocator(rejectionTTL time.Duration) *Allocator {
	return &Allocator{rejectionTTL: rejectionTTL, now: time.Now, instances: map[string]*instanceNames{}}
}

// Lease is a device name held for one attach in progress. Release it when the
// attach has finished (whether or not it succeeded): from then on EC2's own
// view of the instance says whether the name is taken.
type Lease struct {
	// Name is the device name to pass to AttachVolume, e.g. /dev/xvdba.
	Name string

	allocator  *Allocator
	instanceID string
	once       sync.Once
}

// Release gives the name back. Calling it more than once is harmless.
func (l *Lease) Release() {
	l.once.Do(func() { l.allocator.release(l.instanceID, l.Name) })
}

// Acquire picks a device name for attaching volumeID to instanceID. inUse are
// the names EC2 reports on the instance (its block-device mapping). A volume
// that already holds a name on the instance gets the same name again. The
// search skips names in use, names other attaches hold and, while any other
// name is free, names EC2 recently rejected.
func (a *Allocator) Acquire(instanceID, volumeID string, inUse []string) (*Lease, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forgetIdle()
	inst := a.instance(instanceID)
	inst.lastUsed = a.now()
	for _, h := range inst.held {
		if h.volumeID == volumeID {
			h.refs++
			return &Lease{Name: h.name, allocator: a, instanceID: instanceID}, nil
		}
	}
	taken := make(map[string]bool, len(inUse)+len(inst.held))
	for _, n := range inUse {
		taken[canonical(n)] = true
	}
	for key := range inst.held {
		taken[key] = true
	}

	name, ok := a.pick(inst, taken)
	if !ok {
		return nil, fmt.Errorf("instance %s: all %d candidate names are in use: %w", instanceID, len(preferred)+len(fallback), ErrNoFreeName)
	}
	inst.held[canonical(name)] = &holder{name: name, volumeID: volumeID, refs: 1}
	return &Lease{Name: name, allocator: a, instanceID: instanceID}, nil
}

// pick chooses a free name: a preferred one round-robin from where the last
// search stopped, then a fallback one, then the name rejected longest ago.
func (a *Allocator) pick(inst *instanceNames, taken map[string]bool) (string, bool) {
	usable := func(n string) bool {
		if taken[canonical(n)] {
			return false
		}
		_, rejected := inst.rejected[n]
		return !rejected
	}
	for i := range preferred {
		idx := (inst.next + i) % len(preferred)
		if usable(preferred[idx]) {
			inst.next = (idx + 1) % len(preferred)
			return preferred[idx], true
		}
	}
	for _, n := range fallback {
		if usable(n) {
			return n, true
		}
	}
	rejected := make([]string, 0, len(inst.rejected))
	for n := range inst.rejected {
		if !taken[canonical(n)] {
			rejected = append(rejected, n)
		}
	}
	if len(rejected) == 0 {
		return "", false
	}
	sort.Slice(rejected, func(i, j int) bool {
		ti, tj := inst.rejected[rejected[i]], inst.rejected[rejected[j]]
		if ti.Equal(tj) {
			return rejected[i] < rejected[j]
		}
		return ti.Before(tj)
	})
	return rejected[0], true
}

// Reject records that EC2 refused name on instanceID because it is in use, so
// later attaches try other names first.
func (a *Allocator) Reject(instanceID, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.instance(instanceID).rejected[name] = a.now()
}

func (a *Allocator) release(instanceID, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	inst, ok := a.instances[instanceID]
	if !ok {
		return
	}
	key := canonical(name)
	if h, ok := inst.held[key]; ok {
		h.refs--
		if h.refs <= 0 {
			delete(inst.held, key)
		}
	}
	inst.lastUsed = a.now()
}

// forgetIdle drops instances that hold no name, have no recent rejection and
// saw no attach for idleTTL, so a long-running controller does not keep every
// node it has ever seen.
func (a *Allocator) forgetIdle() {
	now := a.now()
	for id, inst := range a.instances {
		a.expireRejections(inst)
		if len(inst.held) == 0 && len(inst.rejected) == 0 && now.Sub(inst.lastUsed) >= idleTTL {
			delete(a.instances, id)
		}
	}
}

func (a *Allocator) instance(instanceID string) *instanceNames {
	inst, ok := a.instances[instanceID]
	if !ok {
		inst = &instanceNames{held: map[string]*holder{}, rejected: map[string]time.Time{}}
		a.instances[instanceID] = inst
	}
	return inst
}

func (a *Allocator) expireRejections(inst *instanceNames) {
	now := a.now()
	for n, at := range inst.rejected {
		if now.Sub(at) >= a.rejectionTTL {
			delete(inst.rejected, n)
		}
	}
}
