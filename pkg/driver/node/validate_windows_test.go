package node

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCheckPathWindows checks the paths a Windows kubelet sends: a drive
// letter and back or forward slashes are accepted; a path without a drive,
// relative, with . or .., or a UNC path, is not.
func TestCheckPathWindows(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{`c:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\pvc-1\mount`, true},
		{`C:\var\lib\kubelet\plugins\kubernetes.io\csi\ebs.csi.diskplane.io\abc\globalmount\`, true},
		{`c:/var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pvc-1/mount`, true},
		{`c:/var/lib/kubelet/pods/p1/mount/`, true},
		{`\var\lib\kubelet\pods\p1`, false},
		{`/var/lib/kubelet/pods/p1`, false},
		{`var\lib\kubelet`, false},
		{`c:var\lib`, false},
		{`c:\var\lib\kubelet\..\..\windows`, false},
		{`c:/var/lib/kubelet/./pods`, false},
		{`\\server\share\kubelet`, false},
	}
	for _, tc := range tests {
		err := checkPath("target path", tc.path)
		if tc.ok && err != nil {
			t.Errorf("checkPath(%q) = %v, want accepted", tc.path, err)
		}
		if !tc.ok && status.Code(err) != codes.InvalidArgument {
			t.Errorf("checkPath(%q) = %v, want InvalidArgument", tc.path, err)
		}
	}
}
