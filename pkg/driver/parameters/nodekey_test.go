package parameters

import (
	"testing"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

func TestNodeEncryptionKey(t *testing.T) {
	p := newTestParser(t, Config{})
	const role = "arn:aws:iam::123456789012:role/shop-db"
	kms := func(extra map[string]string) map[string]string {
		params := map[string]string{"nodeEncryption": "luks2", "nodeEncryptionKeySource": "kms",
			"nodeEncryptionKmsKeyId": "alias/volumes", "nodeEncryptionRoleArn": role}
		for k, v := range extra {
			if v == "" {
				delete(params, k)
				continue
			}
			params[k] = v
		}
		return params
	}
	tests := []struct {
		name    string
		params  map[string]string
		want    NodeEncryptionKey
		wantErr string
	}{
		{name: "kms", params: kms(nil), want: NodeEncryptionKey{Source: "kms", KMSKeyID: "alias/volumes", RoleARN: role}},
		{name: "keys in any case", params: map[string]string{"NODEENCRYPTION": "luks2", "NodeEncryptionKeySource": "KMS",
			"nodeencryptionkmskeyid": "arn:aws:kms:us-east-1:123456789012:key/k", "NODEENCRYPTIONROLEARN": role},
			want: NodeEncryptionKey{Source: "kms", KMSKeyID: "arn:aws:kms:us-east-1:123456789012:key/k", RoleARN: role}},
		{name: "secret said out loud", params: map[string]string{"nodeEncryption": "luks2", "nodeEncryptionKeySource": "secret"},
			want: NodeEncryptionKey{Source: "secret"}},
		{name: "no node encryption", params: kms(map[string]string{"nodeEncryption": ""}), wantErr: "nodeEncryption is not set"},
		{name: "no key", params: kms(map[string]string{"nodeEncryptionKmsKeyId": ""}), wantErr: "needs nodeEncryptionKmsKeyId"},
		{name: "no role", params: kms(map[string]string{"nodeEncryptionRoleArn": ""}), wantErr: "needs nodeEncryptionRoleArn"},
		{name: "unknown source", params: kms(map[string]string{"nodeEncryptionKeySource": "vault"}), wantErr: `"nodeEncryptionKeySource": is "vault"`},
		{name: "a user's ARN", params: kms(map[string]string{"nodeEncryptionRoleArn": "arn:aws:iam::123456789012:user/x"}), wantErr: "want an IAM role ARN"},
		{name: "a key with spaces", params: kms(map[string]string{"nodeEncryptionKmsKeyId": "alias/a b"}), wantErr: "want a KMS key ID"},
		{name: "key without kms", params: map[string]string{"nodeEncryption": "luks2", "nodeEncryptionKmsKeyId": "alias/x"}, wantErr: "is not kms"},
		{name: "role without kms", params: map[string]string{"nodeEncryption": "luks2", "nodeEncryptionKeySource": "secret", "nodeEncryptionRoleArn": role}, wantErr: "is not kms"},
		{name: "fenced read-only on revocation", params: kms(map[string]string{"nodeEncryptionOnRevocation": "read-only"}),
			want: NodeEncryptionKey{Source: "kms", KMSKeyID: "alias/volumes", RoleARN: role, FenceOnRevocation: true, onRevocationSet: true}},
		{name: "kept on revocation, said out loud", params: kms(map[string]string{"nodeEncryptionOnRevocation": "Keep"}),
			want: NodeEncryptionKey{Source: "kms", KMSKeyID: "alias/volumes", RoleARN: role, onRevocationSet: true}},
		{name: "unknown revocation behaviour", params: kms(map[string]string{"nodeEncryptionOnRevocation": "unmount"}),
			wantErr: `is "unmount": want keep (the pod keeps its mount; the default) or read-only`},
		{name: "revocation behaviour without kms", params: map[string]string{"nodeEncryption": "luks2", "nodeEncryptionOnRevocation": "read-only"},
			wantErr: "only a key unlocked with the pod's identity can be revoked"},
		{name: "the wrapped key is not a parameter", params: kms(map[string]string{"nodeEncryptionWrappedKey": "AAAA"}), wantErr: "not a StorageClass parameter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := p.Volume(tc.params, nil, "")
			if tc.wantErr != "" {
				wantInvalid(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.NodeEncryptionKey != tc.want {
				t.Fatalf("NodeEncryptionKey = %+v, want %+v", v.NodeEncryptionKey, tc.want)
			}
			if v.Context[volumecontext.NodeEncryptionKey] != "luks2" {
				t.Fatalf("context %v", v.Context)
			}
		})
	}
}
