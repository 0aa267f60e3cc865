package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestNodeFlagValidation(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: nil},
		{args: []string{"--volume-attach-limit=20"}},
		{args: []string{"--reserved-volume-attachments=0"}},
		{args: []string{"--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock"}},
		{args: []string{"--volume-attach-limit=0"}, wantErr: "want 1 or more"},
		{args: []string{"--volume-attach-limit=-5"}, wantErr: "want 1 or more"},
		{args: []string{"--reserved-volume-attachments=-2"}, wantErr: "want 0 or more"},
		{args: []string{"--volume-attach-limit=20", "--reserved-volume-attachments=2"}, wantErr: "exclude each other"},
		{args: []string{"--kubelet-registration-path=csi.sock"}, wantErr: "absolute"},
		{args: []string{"--csi-proxy-wait=0s"}, wantErr: "positive"},
		{args: []string{"--windows-host-process"}, wantErr: "for Windows nodes"},
		{args: []string{"--luks-pbkdf-iterations=4"}},
		{args: []string{"--luks-pbkdf-iterations=3"}, wantErr: "4 to 1000 passes"},
		{args: []string{"--luks-max-pbkdf-memory=1048576"}},
		{args: []string{"--luks-max-pbkdf-memory=16384"}, wantErr: "the node must open what it writes"},
		{args: []string{"--luks-pbkdf-memory=262144", "--luks-max-pbkdf-memory=131072"}, wantErr: "the node must open what it writes"},
	}
	for _, tc := range tests {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f nodeFlags
		f.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := f.validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%v: validate = %v, want error containing %q", tc.args, err, tc.wantErr)
		}
	}
}
