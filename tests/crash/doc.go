// Package crash is the crash-point harness of the node: it proves that an
// interruption at any step of staging, expanding or unstaging a volume never
// loses data and never strands the volume.
//
// Every node operation is a series of external steps — on Linux each program
// the node plugin runs (blkid, cryptsetup, mkfs, mount, resize2fs …), on
// Windows each csi-proxy call. The harness first runs an operation
// uninterrupted and records its steps. Then, for each step k, it runs the
// operation again on a fresh volume with an interruption at k:
//
//   - fail: step k fails (the program exits 1 without running, the call
//     answers an error), and the plugin goes on as it would;
//   - kill: the plugin is SIGKILLed right before step k, after everything it
//     did since step k-1 (on Windows: the plugin is gone from step k on);
//   - kill-after: the plugin is SIGKILLed right after step k ran, before it
//     saw the result (the full profile only).
//
// and recovers the way a node does:
//
//   - retry: the kubelet calls the operation again, same plugin process;
//   - restart: the plugin starts again and the kubelet calls again;
//   - reboot: the node restarts at that moment (mounts and mappings gone,
//     the disk holding what had reached it) and the volume is staged again;
//   - snapshot: the volume is copied at that moment, as a snapshot would
//     copy it, and the copy is staged as a new volume.
//
// After each recovery it checks that the operation completed, that every
// byte written before the interruption is there, and that data written
// after it survives the next fresh open of the volume — which is where a
// half-finished LUKS preparation used to wipe a filesystem. It prints a
// table, operation × step × recovery, and fails on any cell that lost data
// or left the volume unusable.
//
// Linux runs in the node VM (make test-vm: real dm-crypt, ext4 and xfs,
// online growth), driving the real mounter and node service in a plugin
// process of its own; the steps are seen through shims put first in the
// plugin's PATH. Windows runs under Wine (make test-windows), the node
// service over the csi-proxy library and the emulated Windows host of
// pkg/emulator/winhost, whose fault hooks make a call fail or a volume
// appear late. DISKPLANE_CRASH_PROFILE=full (make test-crash) runs every
// interruption and recovery at every step; the default CI profile runs every
// step with a rotating pair of them.
package crash
