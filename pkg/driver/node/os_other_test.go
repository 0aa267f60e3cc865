//go:build !windows

package node

import "syscall"

// kubeletDir is the kubelet's root directory on a Linux node.
const kubeletDir = "/var/lib/kubelet"

// corruptedErrno is what stat of a corrupted mount point fails with on
// Linux (a FUSE or network filesystem whose server is gone).
const corruptedErrno = syscall.ENOTCONN
