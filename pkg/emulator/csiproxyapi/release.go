package csiproxyapi

import (
	"fmt"
	"strings"
)

// Release is a csi-proxy release whose behaviour the emulator reproduces,
// as far as a node plugin can tell releases apart. Releases differ in the
// API group versions they serve and in how a few calls behave; the rest of
// the emulator answers as every release since v1.0 does.
type Release struct {
	// Version is the release's tag.
	Version string
	// VolumeV2Alpha1: the release serves the volume API group at v2alpha1
	// besides v1 (v1.1.0 and later), which is how a plugin tells a release
	// older than v1.1.0 at start.
	VolumeV2Alpha1 bool
	// MountByAccessPath: MountVolume runs Add-PartitionAccessPath and fails
	// on a path that is the volume's mount point already (up to v1.2.1;
	// v1.3.0 calls SetVolumeMountPoint, which takes that as done).
	MountByAccessPath bool
}

// Releases are the csi-proxy releases the emulator answers as, oldest
// first: the last of each line whose behaviour differs.
var Releases = []Release{
	{Version: "v1.0.2", MountByAccessPath: true},
	{Version: "v1.1.3", VolumeV2Alpha1: true, MountByAccessPath: true},
	{Version: "v1.2.1", VolumeV2Alpha1: true, MountByAccessPath: true},
	{Version: "v1.3.0", VolumeV2Alpha1: true},
}

// DefaultRelease is the release the emulator answers as unless told
// otherwise: the newest, whose client Diskplane is built with.
var DefaultRelease = Releases[len(Releases)-1]

// ReleaseOf returns the release with that version.
func ReleaseOf(version string) (Release, error) {
	var known []string
	for _, r := range Releases {
		if r.Version == version {
			return r, nil
		}
		known = append(known, r.Version)
	}
	return Release{}, fmt.Errorf("csi-proxy %q is not a release the emulator answers as (%s)", version, strings.Join(known, ", "))
}
