package kms_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkkms "github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
)

const (
	sharedKeyID = "5678abcd-12ab-34cd-56ef-1234567890ab"
	// appIdentityPolicy lets a role decrypt only keys wrapped for the shop
	// namespace: the binding a tenant's role gets on a CMK all tenants share.
	appIdentityPolicy = `{"Statement":[{"Effect":"Allow","Action":"kms:Decrypt","Resource":"arn:aws:kms:us-east-1:123456789012:key/*",
		"Condition":{"StringEquals":{"kms:EncryptionContext:diskplane:namespace":"shop"}}}]}`
	deniedIdentityPolicy = `{"Statement":[{"Effect":"Deny","Action":"kms:*","Resource":"*"}]}`
)

// TestKeyPolicyDelegatesToIAM: a key whose policy names only the account
// (KMS's default, "Enable IAM User Permissions") lets a principal do what
// its identity-based policies allow and nothing else, as in AWS; a key
// policy naming the role allows it outright; an explicit deny in either
// refuses, and each refusal says which policy decided.
func TestKeyPolicyDelegatesToIAM(t *testing.T) {
	f := start(t, t.TempDir())
	ctx := t.Context()
	admin := f.client("ADMIN", "admin-secret", "")
	wrap := func(key, namespace string) []byte {
		out, err := admin.Encrypt(ctx, &sdkkms.EncryptInput{KeyId: aws.String(key), Plaintext: []byte("volume key"),
			EncryptionContext: map[string]string{volumeKey: "vol-1", "diskplane:namespace": namespace}})
		if err != nil {
			t.Fatalf("Encrypt with %s for %s: %v", key, namespace, err)
		}
		return out.CiphertextBlob
	}
	shop, bank := wrap("alias/shared", "shop"), wrap("alias/shared", "bank")
	tests := []struct {
		name      string
		client    *sdkkms.Client
		blob      []byte
		namespace string
		wantErr   string // in the AccessDeniedException's message; empty: allowed
	}{
		{name: "a role's identity policy allows its namespace", client: f.session(t, appRole, "app"), blob: shop, namespace: "shop"},
		{name: "another namespace's key under the same CMK", client: f.session(t, appRole, "app"), blob: bank, namespace: "bank",
			wantErr: "because no identity-based policy allows the kms:Decrypt action"},
		{name: "a role without identity policies", client: f.session(t, "arn:aws:iam::123456789012:role/other", "other"), blob: shop, namespace: "shop",
			wantErr: "because no identity-based policy allows the kms:Decrypt action"},
		{name: "an explicit deny in an identity policy wins", client: f.session(t, "arn:aws:iam::123456789012:role/denied", "denied"), blob: shop,
			namespace: "shop", wantErr: "with an explicit deny in an identity-based policy"},
		{name: "the account's root user itself", client: f.client("ROOT", "root-secret", ""), blob: bank, namespace: "bank"},
		{name: "a user whose identity policy allows kms:*", client: admin, blob: bank, namespace: "bank"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.client.Decrypt(ctx, &sdkkms.DecryptInput{CiphertextBlob: tc.blob,
				EncryptionContext: map[string]string{volumeKey: "vol-1", "diskplane:namespace": tc.namespace}})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Decrypt: %v", err)
				}
				return
			}
			if code(err) != "AccessDeniedException" || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Decrypt = %v, want AccessDeniedException %q", err, tc.wantErr)
			}
		})
	}

	// A key policy naming the role allows it without an identity policy;
	// an identity policy's explicit deny still refuses.
	out, err := f.client("CTRL", "ctrl-secret", "").GenerateDataKeyWithoutPlaintext(ctx, &sdkkms.GenerateDataKeyWithoutPlaintextInput{
		KeyId: aws.String("alias/volumes"), KeySpec: types.DataKeySpecAes256, EncryptionContext: volumeContext("vol-2")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.session(t, "arn:aws:iam::123456789012:role/other", "other").Decrypt(ctx, &sdkkms.DecryptInput{
		CiphertextBlob: out.CiphertextBlob, EncryptionContext: volumeContext("vol-2")}); code(err) != "AccessDeniedException" {
		t.Fatalf("a role the key policy does not name: %v", err)
	}
	if _, err := f.session(t, appRole, "app").Decrypt(ctx, &sdkkms.DecryptInput{CiphertextBlob: out.CiphertextBlob,
		EncryptionContext: volumeContext("vol-2")}); err != nil {
		t.Fatalf("the role the key policy names: %v", err)
	}
}
