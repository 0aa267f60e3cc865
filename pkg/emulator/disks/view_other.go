//go:build !linux

package disks

// Expose fails on this operating system: views need the loop store.
func (v View) Expose(volumeID, devPath string) error { return ErrLoopDevicesUnsupported }

// Withdraw fails on this operating system: views need the loop store.
func (v View) Withdraw(volumeID, devPath string) error { return ErrLoopDevicesUnsupported }

// Reconcile fails on this operating system: views need the loop store.
func (v View) Reconcile(attached map[string]string) error { return ErrLoopDevicesUnsupported }
