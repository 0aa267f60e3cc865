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
