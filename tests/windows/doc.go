// Package windows proves Diskplane's Windows node on this Linux machine,
// with Wine and an emulated csi-proxy, as far as that can go:
//
//   - With the build tag wine (make test-windows): the real diskplane.exe
//     --mode=node under Wine, over csi-proxy's named pipes served by
//     csi-proxy-emulator.exe (also under Wine), whose disks are the volumes
//     the EC2 emulator attached to the instance it plays, driven by a
//     scenario (attach, stage, publish, restart, stage again, grow, unstage,
//     detach) and by csi-sanity's node specs, with Diskplane's controller on
//     Linux against the same EC2 emulator. It also checks that the plugin
//     refuses to start without csi-proxy.
//   - Built for Windows and run under Wine (GOOS=windows go test): the same
//     scenario in HostProcess mode, the csi-proxy v2 library in process over
//     host APIs the emulated host provides.
//
// What needs a real Windows node (csi-proxy's own answers, PowerShell, NTFS
// itself, the kubelet) is listed in docs/windows.md.
package windows
