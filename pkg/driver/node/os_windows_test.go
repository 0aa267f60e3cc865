package node

import "golang.org/x/sys/windows"

// kubeletDir is the kubelet's root directory on a Windows node, as it
// sends paths below it.
const kubeletDir = `c:\var\lib\kubelet`

// corruptedErrno is one of the errors a corrupted mount point (an SMB share
// that went away) fails with on Windows.
const corruptedErrno = windows.ERROR_NETNAME_DELETED
