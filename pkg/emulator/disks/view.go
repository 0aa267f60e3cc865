package disks

import "fmt"

// View is how one instance the host plays sees the volumes attached to it,
// when the host plays several (a multi-node local cluster, each node an
// instance in its own namespaces). Every attached volume still gets one loop
// device on the host (the Store's Attach); the View decides which instance
// may find and open it, as EC2 hands a volume to one instance's hypervisor
// and no other:
//   - LinkDir is the instance's by-id link directory as the host sees it (a
//     directory below the instance's own /dev). The volume's link appears there
//     at attach and goes at detach, so only that instance discovers it.
//   - DevicesCgroup is the cgroup v1 devices directory that holds the
//     instance's containers (the kubelet's cgroup root). It must deny
//     reading and writing every loop device by default ("b 7:N rw"); the
//     View grants the volume's device at attach and denies it again at
//     detach, so that no other instance can open it even through a device
//     node it makes itself. Empty means no cgroup is managed.
//
// The loop device nodes and sysfs stay visible to every instance: the
// isolation is of discovery and access, not of the kernel's listing.
type View struct {
	LinkDir       string `json:"linkDir"`
	DevicesCgroup string `json:"devicesCgroup,omitempty"`
}

// Validate says whether the view can be used: a link directory is required
// and both paths must be absolute, since the emulator may run elsewhere than
// the harness that declared them.
func (v View) Validate() error {
	if v.LinkDir == "" || v.LinkDir[0] != '/' {
		return fmt.Errorf("an instance's link directory must be an absolute path, not %q", v.LinkDir)
	}
	if v.DevicesCgroup != "" && v.DevicesCgroup[0] != '/' {
		return fmt.Errorf("an instance's devices cgroup must be an absolute path, not %q", v.DevicesCgroup)
	}
	return nil
}
