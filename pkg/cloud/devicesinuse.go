package cloud

import (
	"context"
	"slices"
	"sync"
	"time"
)

// devicesInUse remembers, per instance, the device names its last
// DescribeInstances listed, for DeviceNamesTTL, so that the attaches to one
// node that come a pod at a time do not each read the instance again. A
// view that old is safe to pick a name from because EC2, not the view,
// decides: a name taken meanwhile (by another tool, or by an attach whose
// mapping the view predates) is refused as in use, which drops the
// instance's view, and the attach tries another name against a fresh read
// (see AttachVolume). The names this process attaches do not collide with
// a stale view in practice: the allocator hands names out round-robin, so
// a name comes round again only after every other preferred name.
type devicesInUse struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	views map[string]instanceDevices
}

// instanceDevices is one instance's view: its device names and when the
// DescribeInstances that listed them was sent.
type instanceDevices struct {
	names []string
	read  time.Time
}

func newDevicesInUse(ttl time.Duration) *devicesInUse {
	return &devicesInUse{ttl: ttl, now: time.Now, views: map[string]instanceDevices{}}
}

// names returns the instance's device names from a view younger than the
// TTL (fresh false), or reads the instance (fresh true). A read that fails
// leaves no view: the instance may be gone.
func (d *devicesInUse) names(ctx context.Context, instanceID string, read func(context.Context) ([]string, error)) (names []string, fresh bool, err error) {
	if names, ok := d.view(instanceID); ok {
		return names, false, nil
	}
	sent := d.now()
	names, err = read(ctx)
	if err != nil {
		d.forget(instanceID)
		return nil, true, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Storing a view is the rare step (once a TTL per instance at most), so
	// it is where the expired views of instances no longer attached to go.
	for id, v := range d.views {
		if sent.Sub(v.read) >= d.ttl {
			delete(d.views, id)
		}
	}
	if v, ok := d.views[instanceID]; !ok || v.read.Before(sent) {
		d.views[instanceID] = instanceDevices{names: slices.Clone(names), read: sent}
	}
	return names, true, nil
}

// view returns the instance's names while its view is younger than the
// TTL.
func (d *devicesInUse) view(instanceID string) ([]string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.views[instanceID]
	if !ok || d.now().Sub(v.read) >= d.ttl {
		return nil, false
	}
	return slices.Clone(v.names), true
}

// forget drops an instance's view: EC2 refused a name it showed free, or
// the instance could not be read.
func (d *devicesInUse) forget(instanceID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.views, instanceID)
}
