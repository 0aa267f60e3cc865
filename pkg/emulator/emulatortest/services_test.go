package emulatortest

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/iam/iamtest"
	emukms "github.com/diskplane/diskplane/pkg/emulator/kms"
)

func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

type tokenFile string

func (f tokenFile) GetIdentityToken() ([]byte, error) { return []byte(f), nil }

// TestServicesOnTheAPIListener points one SDK configuration (the
// endpoint of every service, as AWS_ENDPOINT_URL would) at the emulator:
// EC2, STS and KMS answer on the same address, and a web identity's
// credentials from STS are what KMS accepts.
func TestServicesOnTheAPIListener(t *testing.T) {
	issuer := iamtest.NewIssuer(t, "https://kubernetes.default.svc.cluster.local")
	const role = "arn:aws:iam::123456789012:role/app"
	appPolicy, err := iam.ParsePolicy([]byte(`{"Statement":[{"Effect":"Allow","Action":["kms:GenerateDataKey","kms:Decrypt"],"Resource":"*"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	env := Start(t, Options{
		IAM: iam.Config{
			OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
			// The key's policy is KMS's default, which names only the
			// account: the role's identity-based policy grants the calls.
			Roles: []iam.Role{{Name: "app", TrustPolicy: issuer.TrustPolicy("123456789012", "system:serviceaccount:shop:*"),
				Policies: []*iam.Policy{appPolicy}}},
		},
		KMS: emukms.Config{Keys: []emukms.KeySpec{{ID: "volumes", Aliases: []string{"alias/volumes"}}}},
	})
	ctx := t.Context()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(env.Region()), config.WithBaseEndpoint(env.EC2URL),
		config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	if err != nil {
		t.Fatal(err)
	}
	token := issuer.Token(t, "system:serviceaccount:shop:db", "sts.amazonaws.com", time.Hour)
	cfg.Credentials = aws.NewCredentialsCache(stscreds.NewWebIdentityRoleProvider(sts.NewFromConfig(cfg), role, tokenFile(token)))
	client := kms.NewFromConfig(cfg)
	out, err := client.GenerateDataKey(ctx, &kms.GenerateDataKeyInput{KeyId: aws.String("alias/volumes"), KeySpec: types.DataKeySpecAes256,
		EncryptionContext: map[string]string{"diskplane:volume-id": "vol-1"}})
	if err != nil {
		t.Fatal(err)
	}
	back, err := client.Decrypt(ctx, &kms.DecryptInput{CiphertextBlob: out.CiphertextBlob, EncryptionContext: map[string]string{"diskplane:volume-id": "vol-1"}})
	if err != nil || !bytes.Equal(back.Plaintext, out.Plaintext) {
		t.Fatalf("Decrypt = %v", err)
	}
	if n := env.ServiceCalls("sts", "AssumeRoleWithWebIdentity", "Success"); n != 1 {
		t.Fatalf("%d AssumeRoleWithWebIdentity", n)
	}
	if _, err := ec2.NewFromConfig(cfg).DescribeVolumes(ctx, &ec2.DescribeVolumesInput{}); err != nil {
		t.Fatalf("EC2 on the same address: %v", err)
	}
	if n := env.Calls("DescribeVolumes"); n != 1 {
		t.Fatalf("%d DescribeVolumes", n)
	}
}

// TestEBSEncryptionKeyMustBeUsable: an encrypted volume's KmsKeyId names a
// key of the emulator's KMS that is enabled.
func TestEBSEncryptionKeyMustBeUsable(t *testing.T) {
	disabled := false
	env := Start(t, Options{KMS: emukms.Config{Keys: []emukms.KeySpec{
		{ID: "ebs", Aliases: []string{"alias/ebs"}}, {ID: "off", Enabled: &disabled},
	}}})
	client := env.EC2Client()
	create := func(key string) error {
		_, err := client.CreateVolume(t.Context(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(env.Zone()), Size: aws.Int32(1),
			Encrypted: aws.Bool(true), KmsKeyId: aws.String(key)})
		return err
	}
	for _, tc := range []struct{ key, want string }{
		{"alias/ebs", ""},
		{"arn:aws:kms:us-east-1:123456789012:key/ebs", ""},
		{"alias/nothing", "InvalidKMSKey.NotFound"},
		{"off", "InvalidKMSKey.InvalidState"},
	} {
		if got := errorCode(create(tc.key)); got != tc.want {
			t.Errorf("KmsKeyId %s: %q, want %q", tc.key, got, tc.want)
		}
	}
	if _, err := client.CopyVolumes(t.Context(), &ec2.CopyVolumesInput{SourceVolumeId: aws.String("vol-0000000000000000"),
		Encrypted: aws.Bool(true), KmsKeyId: aws.String("alias/nothing")}); errorCode(err) != "InvalidKMSKey.NotFound" {
		t.Errorf("CopyVolumes with a missing key: %v", err)
	}
}

// TestIdentityAdminAPI declares and revokes through the admin listener.
func TestIdentityAdminAPI(t *testing.T) {
	env := Start(t, Options{})
	issuer := iamtest.NewIssuer(t, "https://issuer.example.com")
	put := func(path string, doc any) *http.Response {
		t.Helper()
		b, _ := json.Marshal(doc)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, env.AdminURL+path, bytes.NewReader(b))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	cfg := iam.Config{
		OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
		Roles:         []iam.Role{{Name: "app", TrustPolicy: issuer.TrustPolicy("123456789012", "*")}},
		// k1 has KMS's default policy: the key's identity-based policy,
		// sent over the admin API, is what lets it describe the key.
		AccessKeys: []iam.AccessKey{{ID: "ctrl", Secret: "s", Principal: "arn:aws:iam::123456789012:role/controller",
			Policies: []*iam.Policy{{Statement: []iam.Statement{{Effect: iam.EffectAllow, Action: iam.StringList{"kms:DescribeKey"}}}}}}},
	}
	if resp := put("/iam", cfg); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /iam: %s", resp.Status)
	}
	if resp := put("/iam", iam.Config{Roles: []iam.Role{{Name: "no-trust"}}}); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("PUT /iam of a role without a trust policy: %s", resp.Status)
	}
	if got := env.IAM().Config(); len(got.Roles) != 1 || got.AccessKeys[0].Secret != "" {
		t.Fatalf("IAM now %+v", got)
	}
	if resp := put("/kms/keys/k1", emukms.KeySpec{Aliases: []string{"alias/k1"}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /kms/keys/k1: %s", resp.Status)
	}
	if resp := put("/kms/keys/k1", map[string]any{"aliases": []string{"alias/k1"}, "enabled": false}); resp.StatusCode != http.StatusOK {
		t.Fatalf("disable k1: %s", resp.Status)
	}
	if err := env.Keys().Usable("k1"); !errors.Is(err, emukms.ErrKeyDisabled) {
		t.Fatalf("k1 after it was disabled: %v", err)
	}
	if resp := put("/kms/keys/bad%20id", emukms.KeySpec{}); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad key ID: %s", resp.Status)
	}
	ctrl := kms.NewFromConfig(env.AWSConfig("ctrl", "s"))
	if _, err := ctrl.DescribeKey(t.Context(), &kms.DescribeKeyInput{KeyId: aws.String("alias/k1")}); err != nil {
		t.Fatalf("the declared access key: %v", err)
	}
	resp, err := http.Get(env.AdminURL + "/kms/keys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var keys []emukms.KeyInfo
	if err := json.NewDecoder(resp.Body).Decode(&keys); err != nil || len(keys) != 1 || keys[0].Enabled {
		t.Fatalf("GET /kms/keys = %+v, %v", keys, err)
	}
}
