package datakeys

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/iam/iamtest"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
)

// tenantPolicy is what docs/encryption.md gives each tenant's role: Decrypt
// with any volume key KMS key of the account, only for keys bound to the
// tenant's namespace.
func tenantPolicy(t *testing.T, namespace string) *iam.Policy {
	return iamtest.Policy(t, `{"Statement":[{"Effect":"Allow","Action":"kms:Decrypt",
		"Resource":"arn:aws:kms:us-east-1:123456789012:key/*",
		"Condition":{"StringEquals":{"kms:EncryptionContext:diskplane:namespace":"`+namespace+`"}}}]}`)
}

// stated is the other way docs/install.md shows: a key policy that names
// each tenant's role with a condition on its namespace (and the account
// root for nobody), so IAM policies play no part.
const stated = `{"Statement":[
	{"Effect":"Allow","Principal":{"AWS":"` + ctrlRole + `"},"Action":["kms:GenerateDataKeyWithoutPlaintext","kms:ReEncrypt*"],"Resource":"*"},
	{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:role/shop"},"Action":"kms:Decrypt","Resource":"*",
	 "Condition":{"StringEquals":{"kms:EncryptionContext:diskplane:namespace":"shop"}}},
	{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:role/bank"},"Action":"kms:Decrypt","Resource":"*",
	 "Condition":{"StringEquals":{"kms:EncryptionContext:diskplane:namespace":"bank"}}}]}`

// TestTenantsShareOneKey: two namespaces' volume keys under one KMS key,
// set up either way docs/install.md shows: KMS's default key policy with
// each tenant's role allowed by an IAM policy conditioned on its
// namespace, or a key policy with a statement per tenant conditioned so. A
// role unwraps its namespace's keys and no other's, nor a key bound to no
// namespace; a key re-wrapped for a restore into the other namespace opens
// for that namespace only; a binding changed by whoever holds the
// ciphertext does not decrypt.
func TestTenantsShareOneKey(t *testing.T) {
	for _, key := range []string{"shared", "stated"} {
		t.Run(key, func(t *testing.T) { tenantsShareOneKey(t, key) })
	}
}

func tenantsShareOneKey(t *testing.T, keyID string) {
	issuer := iamtest.NewIssuer(t, "https://kubernetes.default.svc.cluster.local")
	ctrlPolicy := iamtest.Policy(t, `{"Statement":[{"Effect":"Allow",
		"Action":["kms:GenerateDataKeyWithoutPlaintext","kms:ReEncrypt*"],"Resource":"*"}]}`)
	env := emulatortest.Start(t, emulatortest.Options{
		IAM: iam.Config{
			OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
			Roles: []iam.Role{
				{Name: "shop", TrustPolicy: issuer.TrustPolicy(account, iamtest.ServiceAccountSubject("shop", "db")), Policies: []*iam.Policy{tenantPolicy(t, "shop")}},
				{Name: "bank", TrustPolicy: issuer.TrustPolicy(account, iamtest.ServiceAccountSubject("bank", "db")), Policies: []*iam.Policy{tenantPolicy(t, "bank")}},
			},
			AccessKeys: []iam.AccessKey{{ID: "ctrl", Secret: "ctrl-secret", Principal: ctrlRole, Policies: []*iam.Policy{ctrlPolicy}}},
		},
		KMS: kms.Config{Keys: []kms.KeySpec{
			{ID: "shared"}, // KMS's default policy: IAM decides
			{ID: "stated", Policy: iamtest.Policy(t, stated)},
		}},
	})
	ctx := t.Context()
	wrapper, unwrapper := NewWrapper(env.AWSConfig("ctrl", "ctrl-secret")), NewUnwrapper(env.AWSConfig("ctrl", "ctrl-secret"))
	unwrap := func(tenant string, w Wrapped, b Binding) ([]byte, error) {
		return unwrapper.Unwrap(ctx, UnwrapRequest{
			Token:   issuer.Token(t, iamtest.ServiceAccountSubject(tenant, "db"), "sts.amazonaws.com", time.Hour),
			RoleARN: "arn:aws:iam::123456789012:role/" + tenant, SessionName: tenant + ".db-0",
			KeyID: w.KeyARN, Ciphertext: w.Ciphertext, Binding: b,
		})
	}
	shopVol, bankVol, legacyVol := Binding{VolumeID: "vol-1", Namespace: "shop"}, Binding{VolumeID: "vol-2", Namespace: "bank"}, Binding{VolumeID: "vol-3"}
	wrap := func(b Binding) Wrapped {
		w, err := wrapper.Generate(ctx, keyID, b)
		if err != nil {
			t.Fatalf("Generate for %s: %v", b, err)
		}
		return w
	}
	shopKey, bankKey, legacyKey := wrap(shopVol), wrap(bankVol), wrap(legacyVol)
	restored := Binding{VolumeID: "vol-4", Namespace: "bank"}
	restoredKey, err := wrapper.Rewrap(ctx, shopKey, shopVol, keyID, restored)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		tenant string
		key    Wrapped
		as     Binding
		want   error
	}{
		{name: "shop opens its volume", tenant: "shop", key: shopKey, as: shopVol},
		{name: "bank opens its volume", tenant: "bank", key: bankKey, as: bankVol},
		{name: "shop cannot open bank's", tenant: "shop", key: bankKey, as: bankVol, want: ErrAccessDenied},
		{name: "bank cannot open shop's", tenant: "bank", key: shopKey, as: shopVol, want: ErrAccessDenied},
		{name: "bank claims shop's key is its own", tenant: "bank", key: shopKey, as: Binding{VolumeID: "vol-1", Namespace: "bank"}, want: ErrWrongVolume},
		{name: "a key bound to no namespace", tenant: "shop", key: legacyKey, as: legacyVol, want: ErrAccessDenied},
		{name: "shop's key restored into bank opens for bank", tenant: "bank", key: restoredKey, as: restored},
		{name: "and no longer for shop", tenant: "shop", key: restoredKey, as: restored, want: ErrAccessDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, err := unwrap(tc.tenant, tc.key, tc.as)
			if tc.want != nil {
				if !errors.Is(err, tc.want) || key != nil {
					t.Fatalf("Unwrap = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || len(key) != 32 {
				t.Fatalf("Unwrap = %v", err)
			}
		})
	}
	source, err := unwrap("shop", shopKey, shopVol)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := unwrap("bank", restoredKey, restored); err != nil || !bytes.Equal(got, source) {
		t.Fatalf("the restored volume's key is not its source's: %v", err)
	}
}
