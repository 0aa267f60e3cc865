package mounter

// The platforms of the operating systems Diskplane's node runs on. They are
// defined for every build, so the node service's checks of both can be
// tested on either.
var (
	// LinuxPlatform is everything the Linux node does: ext4, ext3 and xfs
	// (ext4 when a request names none), raw block devices, mount flags,
	// read-only bind mounts, the mount table to find publications in, and
	// inode counts.
	LinuxPlatform = Platform{
		OS:              "linux",
		Filesystems:     []string{"ext4", "ext3", "xfs"},
		Block:           true,
		MountFlags:      true,
		ReadOnlyPublish: true,
		PublicationRefs: true,
		Inodes:          true,
		Encryption:      true,
	}
	// WindowsPlatform is what csi-proxy lets a Windows node do: NTFS on a
	// GPT partition, mounted at the staging path and published as a
	// symlink. csi-proxy formats nothing but NTFS, takes no mount options,
	// has no raw block access for pods, cannot make a symlink read-only or
	// list the symlinks to a path, and reports bytes but no inodes; nor does
	// it encrypt.
	WindowsPlatform = Platform{
		OS:          "windows",
		Filesystems: []string{"ntfs"},
	}
)
