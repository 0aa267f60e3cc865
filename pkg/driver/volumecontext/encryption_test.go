package volumecontext

import "testing"

func TestNodeEncryption(t *testing.T) {
	tests := []struct {
		ctx     map[string]string
		want    string
		wantErr bool
	}{
		{ctx: nil, want: ""},
		{ctx: map[string]string{"fsType": "ext4"}, want: ""},
		{ctx: map[string]string{NodeEncryptionKey: "luks2"}, want: NodeEncryptionLUKS2},
		{ctx: map[string]string{"NodeEncryption": " LUKS2 "}, want: NodeEncryptionLUKS2},
		{ctx: map[string]string{NodeEncryptionKey: "none"}, want: ""},
		{ctx: map[string]string{NodeEncryptionKey: ""}, want: ""},
		{ctx: map[string]string{NodeEncryptionKey: "luks1"}, wantErr: true},
		{ctx: map[string]string{NodeEncryptionKey: "true"}, wantErr: true},
	}
	for _, tc := range tests {
		got, err := NodeEncryption(tc.ctx)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("NodeEncryption(%v) = %q, %v; want %q (error %v)", tc.ctx, got, err, tc.want, tc.wantErr)
		}
	}
}
