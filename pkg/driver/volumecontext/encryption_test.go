package volumecontext

import (
	"strings"
	"testing"
)

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

func TestKeySource(t *testing.T) {
	for _, tc := range []struct {
		ctx     map[string]string
		want    string
		wantErr bool
	}{
		{ctx: nil, want: KeySourceSecret},
		{ctx: map[string]string{NodeEncryptionKeySourceKey: "secret"}, want: KeySourceSecret},
		{ctx: map[string]string{"NODEENCRYPTIONKEYSOURCE": " KMS "}, want: KeySourceKMS},
		{ctx: map[string]string{NodeEncryptionKeySourceKey: "vault"}, wantErr: true},
	} {
		got, err := KeySource(tc.ctx)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("KeySource(%v) = %q, %v", tc.ctx, got, err)
		}
	}
}

func TestKMSKeyOf(t *testing.T) {
	key := KMSKey{KeyID: "arn:aws:kms:us-east-1:123456789012:key/k", RoleARN: "arn:aws:iam::123456789012:role/shop/db", Wrapped: []byte{1, 2, 3}}
	ctx := key.VolumeContext()
	got, err := KMSKeyOf(ctx)
	if err != nil || got.KeyID != key.KeyID || got.RoleARN != key.RoleARN || string(got.Wrapped) != string(key.Wrapped) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if s, _ := KeySource(ctx); s != KeySourceKMS {
		t.Fatalf("the context's key source is %q", s)
	}
	if _, ok := ctx[NodeEncryptionKeyNamespaceKey]; ok || got.Namespace != "" {
		t.Fatalf("a key bound to its volume only names namespace %q", got.Namespace)
	}
	bound := key
	bound.Namespace = "shop"
	if got, err := KMSKeyOf(bound.VolumeContext()); err != nil || got.Namespace != "shop" {
		t.Fatalf("round trip of a key bound to a namespace: %+v, %v", got, err)
	}
	if _, ok := ctx[NodeEncryptionOnRevocationKey]; ok || got.FenceOnRevocation {
		t.Fatal("a key kept on revocation says otherwise")
	}
	fenced := key
	fenced.FenceOnRevocation = true
	if got, err := KMSKeyOf(fenced.VolumeContext()); err != nil || !got.FenceOnRevocation {
		t.Fatalf("round trip of a key fenced on revocation: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name, key, value, wantErr string
	}{
		{name: "no wrapped key", key: NodeEncryptionWrappedKeyKey, value: "", wantErr: "has no nodeEncryptionWrappedKey"},
		{name: "not base64", key: NodeEncryptionWrappedKeyKey, value: "%%%", wantErr: "not base64"},
		{name: "no role", key: NodeEncryptionRoleARNKey, value: " ", wantErr: "has no nodeEncryptionRoleArn"},
		{name: "a user, not a role", key: NodeEncryptionRoleARNKey, value: "arn:aws:iam::123456789012:user/db", wantErr: "not an IAM role ARN"},
		{name: "no key", key: NodeEncryptionKMSKeyIDKey, value: "", wantErr: "has no nodeEncryptionKmsKeyId"},
		{name: "unknown revocation behaviour", key: NodeEncryptionOnRevocationKey, value: "unmount", wantErr: `nodeEncryptionOnRevocation "unmount": want keep or read-only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := key.VolumeContext()
			bad[tc.key] = tc.value
			if _, err := KMSKeyOf(bad); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("KMSKeyOf = %v, want %q", err, tc.wantErr)
			}
		})
	}
	if err := CheckRoleARN("arn:aws-us-gov:iam::123456789012:role/a+b=c,d.e@f-g_h"); err != nil {
		t.Fatal(err)
	}
}
