package kms_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdkkms "github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/iam/iamtest"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/servicemetrics"
)

const (
	account   = "123456789012"
	region    = "us-east-1"
	appRole   = "arn:aws:iam::123456789012:role/app"
	ctrlRole  = "arn:aws:iam::123456789012:role/controller"
	volumeKey = "diskplane:volume-id"
	testKeyID = "1234abcd-12ab-34cd-56ef-1234567890ab"
	keyPolicy = `{"Statement":[
		{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:role/controller"},"Action":["kms:GenerateDataKeyWithoutPlaintext","kms:ReEncrypt*","kms:DescribeKey"],"Resource":"*"},
		{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:role/app"},"Action":"kms:Decrypt","Resource":"*","Condition":{"StringLike":{"kms:EncryptionContext:diskplane:volume-id":"vol-*"}}},
		{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:user/admin"},"Action":"kms:*","Resource":"*"}]}`
)

type fixture struct {
	url     string
	issuer  *iamtest.Issuer
	iam     *iam.Store
	keys    *kms.Store
	metrics *servicemetrics.Metrics
}

func start(t *testing.T, dataDir string) *fixture {
	t.Helper()
	issuer := iamtest.NewIssuer(t, "https://issuer.example.com")
	store, err := iam.New(account, iam.Config{
		OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
		Roles: []iam.Role{
			{Name: "app", TrustPolicy: issuer.TrustPolicy(account, iamtest.ServiceAccountSubject("shop", "app")),
				Policies: []*iam.Policy{iamtest.Policy(t, appIdentityPolicy)}},
			{Name: "other", TrustPolicy: issuer.TrustPolicy(account, iamtest.ServiceAccountSubject("shop", "other"))},
			{Name: "denied", TrustPolicy: issuer.TrustPolicy(account, iamtest.ServiceAccountSubject("shop", "denied")),
				Policies: []*iam.Policy{iamtest.Policy(t, appIdentityPolicy), iamtest.Policy(t, deniedIdentityPolicy)}},
		},
		AccessKeys: []iam.AccessKey{
			{ID: "CTRL", Secret: "ctrl-secret", Principal: ctrlRole},
			{ID: "ADMIN", Secret: "admin-secret", Principal: "arn:aws:iam::123456789012:user/admin",
				Policies: []*iam.Policy{iamtest.Policy(t, `{"Statement":[{"Effect":"Allow","Action":"kms:*","Resource":"*"}]}`)}},
			{ID: "ROOT", Secret: "root-secret", Principal: iam.RootARN(account)},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kms.NewStore(region, account, dataDir, kms.Config{Keys: []kms.KeySpec{
		{ID: testKeyID, Aliases: []string{"alias/volumes"}, Policy: iamtest.Policy(t, keyPolicy)},
		{ID: sharedKeyID, Aliases: []string{"alias/shared"}}, // KMS's default policy: the account's IAM decides
	}})
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := servicemetrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(kms.NewHandler(keys, store, metrics))
	t.Cleanup(srv.Close)
	return &fixture{url: srv.URL, issuer: issuer, iam: store, keys: keys, metrics: metrics}
}

func (f *fixture) client(id, secret, token string) *sdkkms.Client {
	return sdkkms.New(sdkkms.Options{Region: region, BaseEndpoint: aws.String(f.url), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider(id, secret, token)})
}

// session assumes a role with a service account's token, as a pod would.
func (f *fixture) session(t *testing.T, role, serviceAccount string) *sdkkms.Client {
	t.Helper()
	sess, err := f.iam.AssumeRoleWithWebIdentity(iam.WebIdentityRequest{RoleARN: role, SessionName: "shop." + serviceAccount,
		Token: f.issuer.Token(t, iamtest.ServiceAccountSubject("shop", serviceAccount), "sts.amazonaws.com", time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return f.client(sess.AccessKeyID, sess.SecretAccessKey, sess.SessionToken)
}

func code(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

func flipLastByte(b []byte) []byte {
	out := bytes.Clone(b)
	out[len(out)-1] ^= 0xff
	return out
}

func volumeContext(id string) map[string]string { return map[string]string{volumeKey: id} }

func TestWrapAndUnwrapAVolumeKey(t *testing.T) {
	f := start(t, t.TempDir())
	ctx := t.Context()
	ctrl := f.client("CTRL", "ctrl-secret", "")
	wrapped, err := ctrl.GenerateDataKeyWithoutPlaintext(ctx, &sdkkms.GenerateDataKeyWithoutPlaintextInput{
		KeyId: aws.String("alias/volumes"), KeySpec: types.DataKeySpecAes256, EncryptionContext: volumeContext("vol-1")})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(wrapped.KeyId); got != "arn:aws:kms:us-east-1:123456789012:key/"+testKeyID {
		t.Fatalf("KeyId = %s", got)
	}
	app := f.session(t, appRole, "app")
	out, err := app.Decrypt(ctx, &sdkkms.DecryptInput{CiphertextBlob: wrapped.CiphertextBlob, EncryptionContext: volumeContext("vol-1"),
		KeyId: aws.String(testKeyID)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Plaintext) != 32 {
		t.Fatalf("plaintext of %d bytes", len(out.Plaintext))
	}

	// The controller re-wraps it for a clone; the app decrypts the same key
	// under the clone's context, and the old blob never under it.
	rewrapped, err := ctrl.ReEncrypt(ctx, &sdkkms.ReEncryptInput{CiphertextBlob: wrapped.CiphertextBlob, SourceEncryptionContext: volumeContext("vol-1"),
		DestinationKeyId: aws.String(testKeyID), DestinationEncryptionContext: volumeContext("vol-2")})
	if err != nil {
		t.Fatal(err)
	}
	clone, err := app.Decrypt(ctx, &sdkkms.DecryptInput{CiphertextBlob: rewrapped.CiphertextBlob, EncryptionContext: volumeContext("vol-2")})
	if err != nil || !bytes.Equal(clone.Plaintext, out.Plaintext) {
		t.Fatalf("the clone's key differs (%v)", err)
	}

	refusals := []struct {
		name     string
		client   *sdkkms.Client
		in       *sdkkms.DecryptInput
		wantCode string
	}{
		{name: "another volume's context", client: app, wantCode: "InvalidCiphertextException",
			in: &sdkkms.DecryptInput{CiphertextBlob: wrapped.CiphertextBlob, EncryptionContext: volumeContext("vol-2")}},
		{name: "no context", client: app, wantCode: "AccessDeniedException", in: &sdkkms.DecryptInput{CiphertextBlob: wrapped.CiphertextBlob}},
		{name: "another role", client: f.session(t, "arn:aws:iam::123456789012:role/other", "other"), wantCode: "AccessDeniedException",
			in: &sdkkms.DecryptInput{CiphertextBlob: wrapped.CiphertextBlob, EncryptionContext: volumeContext("vol-1")}},
		{name: "the controller may not decrypt", client: ctrl, wantCode: "AccessDeniedException",
			in: &sdkkms.DecryptInput{CiphertextBlob: wrapped.CiphertextBlob, EncryptionContext: volumeContext("vol-1")}},
		{name: "another key named", client: app, wantCode: "IncorrectKeyException",
			in: &sdkkms.DecryptInput{CiphertextBlob: wrapped.CiphertextBlob, EncryptionContext: volumeContext("vol-1"), KeyId: aws.String("alias/volumes-x")}},
		{name: "tampered blob", client: app, wantCode: "InvalidCiphertextException",
			in: &sdkkms.DecryptInput{CiphertextBlob: flipLastByte(wrapped.CiphertextBlob), EncryptionContext: volumeContext("vol-1")}},
		{name: "wrong secret", client: f.client("CTRL", "guess", ""), wantCode: "InvalidSignatureException",
			in: &sdkkms.DecryptInput{CiphertextBlob: wrapped.CiphertextBlob}},
		{name: "unknown key", client: f.client("NOBODY", "x", ""), wantCode: "UnrecognizedClientException",
			in: &sdkkms.DecryptInput{CiphertextBlob: wrapped.CiphertextBlob}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.client.Decrypt(ctx, tc.in)
			if code(err) != tc.wantCode {
				t.Fatalf("Decrypt = %v, want %s", err, tc.wantCode)
			}
			if out != nil {
				t.Fatal("a refusal came with plaintext")
			}
		})
	}
	if err := ctrlDenied(t, f); err != nil {
		t.Fatal(err)
	}
	if n := f.metrics.Count("kms", "Decrypt", servicemetrics.Success); n != 2 {
		t.Fatalf("counted %d successful Decrypts", n)
	}
	if n := f.metrics.Count("kms", "Decrypt", "AccessDeniedException"); n != 3 {
		t.Fatalf("counted %d refused Decrypts", n)
	}
}

// ctrlDenied checks the AccessDeniedException message names the caller,
// the action and the key, as AWS's does.
func ctrlDenied(t *testing.T, f *fixture) error {
	_, err := f.client("CTRL", "ctrl-secret", "").Encrypt(t.Context(), &sdkkms.EncryptInput{KeyId: aws.String(testKeyID), Plaintext: []byte("x")})
	if code(err) != "AccessDeniedException" {
		return err
	}
	for _, want := range []string{ctrlRole, "kms:Encrypt", "key/" + testKeyID} {
		if !strings.Contains(err.Error(), want) {
			return errors.New("the refusal does not name " + want + ": " + err.Error())
		}
	}
	return nil
}

func TestDisabledKeyAndPolicyChanges(t *testing.T) {
	f := start(t, "")
	ctx := t.Context()
	admin := f.client("ADMIN", "admin-secret", "")
	blob, err := admin.Encrypt(ctx, &sdkkms.EncryptInput{KeyId: aws.String(testKeyID), Plaintext: []byte("key"), EncryptionContext: volumeContext("vol-1")})
	if err != nil {
		t.Fatal(err)
	}
	app := f.session(t, appRole, "app")
	decrypt := func() error {
		_, err := app.Decrypt(ctx, &sdkkms.DecryptInput{CiphertextBlob: blob.CiphertextBlob, EncryptionContext: volumeContext("vol-1")})
		return err
	}
	if _, err := admin.DisableKey(ctx, &sdkkms.DisableKeyInput{KeyId: aws.String(testKeyID)}); err != nil {
		t.Fatal(err)
	}
	if err := decrypt(); code(err) != "DisabledException" {
		t.Fatalf("with the key disabled: %v", err)
	}
	if err := f.keys.Usable("alias/volumes"); !errors.Is(err, kms.ErrKeyDisabled) {
		t.Fatalf("Usable = %v", err)
	}
	d, err := admin.DescribeKey(ctx, &sdkkms.DescribeKeyInput{KeyId: aws.String("alias/volumes")})
	if err != nil || d.KeyMetadata.KeyState != types.KeyStateDisabled || d.KeyMetadata.Enabled {
		t.Fatalf("DescribeKey = %+v, %v", d, err)
	}
	if _, err := admin.EnableKey(ctx, &sdkkms.EnableKeyInput{KeyId: aws.String(testKeyID)}); err != nil {
		t.Fatal(err)
	}
	if err := decrypt(); err != nil {
		t.Fatalf("enabled again: %v", err)
	}
	// Revoking the role in the key policy takes effect at the next call,
	// whatever credentials the role's session already holds.
	if _, err := admin.PutKeyPolicy(ctx, &sdkkms.PutKeyPolicyInput{KeyId: aws.String(testKeyID), PolicyName: aws.String("default"),
		Policy: aws.String(`{"Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:user/admin"},"Action":"kms:*","Resource":"*"}]}`)}); err != nil {
		t.Fatal(err)
	}
	if err := decrypt(); code(err) != "AccessDeniedException" {
		t.Fatalf("after the key policy dropped the role: %v", err)
	}
	got, err := admin.GetKeyPolicy(ctx, &sdkkms.GetKeyPolicyInput{KeyId: aws.String(testKeyID)})
	if err != nil || strings.Contains(aws.ToString(got.Policy), "role/app") {
		t.Fatalf("GetKeyPolicy = %v, %v", aws.ToString(got.Policy), err)
	}
	if _, err := admin.PutKeyPolicy(ctx, &sdkkms.PutKeyPolicyInput{KeyId: aws.String(testKeyID), Policy: aws.String(`{"Statement":[]}`)}); code(err) != "MalformedPolicyDocumentException" {
		t.Fatalf("an empty policy: %v", err)
	}
}

func TestCreateKeyAndPersistence(t *testing.T) {
	dir := t.TempDir()
	f := start(t, dir)
	ctx := t.Context()
	admin := f.client("ADMIN", "admin-secret", "")
	created, err := admin.CreateKey(ctx, &sdkkms.CreateKeyInput{Description: aws.String("volumes of shop")})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(created.KeyMetadata.KeyId)
	if created.KeyMetadata.KeyState != types.KeyStateEnabled || aws.ToString(created.KeyMetadata.Arn) != "arn:aws:kms:us-east-1:123456789012:key/"+id {
		t.Fatalf("CreateKey = %+v", created.KeyMetadata)
	}
	blob, err := admin.Encrypt(ctx, &sdkkms.EncryptInput{KeyId: aws.String(id), Plaintext: []byte("secret"), EncryptionContext: volumeContext("vol-9")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateKey(ctx, &sdkkms.CreateKeyInput{KeySpec: types.KeySpecRsa2048}); code(err) != "UnsupportedOperationException" {
		t.Fatalf("an RSA key: %v", err)
	}
	// A new store over the same directory is the emulator restarted.
	again, err := kms.NewStore(region, account, dir, kms.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(kms.NewHandler(again, f.iam, nil))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	out, err := f.client("ADMIN", "admin-secret", "").Decrypt(ctx, &sdkkms.DecryptInput{CiphertextBlob: blob.CiphertextBlob, EncryptionContext: volumeContext("vol-9")})
	if err != nil || string(out.Plaintext) != "secret" {
		t.Fatalf("after a restart: %v", err)
	}
	if err := again.Usable("alias/volumes"); err != nil {
		t.Fatalf("a declared key after a restart: %v", err)
	}
	if err := again.Usable("alias/nothing"); !errors.Is(err, kms.ErrKeyNotFound) {
		t.Fatalf("Usable of a missing alias = %v", err)
	}
}

func TestDataKeysAndDryRun(t *testing.T) {
	f := start(t, "")
	ctx := t.Context()
	admin := f.client("ADMIN", "admin-secret", "")
	k, err := admin.GenerateDataKey(ctx, &sdkkms.GenerateDataKeyInput{KeyId: aws.String(testKeyID), NumberOfBytes: aws.Int32(64)})
	if err != nil || len(k.Plaintext) != 64 {
		t.Fatalf("GenerateDataKey = %v", err)
	}
	out, err := admin.Decrypt(ctx, &sdkkms.DecryptInput{CiphertextBlob: k.CiphertextBlob})
	if err != nil || !bytes.Equal(out.Plaintext, k.Plaintext) {
		t.Fatalf("Decrypt = %v", err)
	}
	if _, err := admin.GenerateDataKey(ctx, &sdkkms.GenerateDataKeyInput{KeyId: aws.String(testKeyID)}); code(err) != "ValidationException" {
		t.Fatalf("no size: %v", err)
	}
	if _, err := admin.GenerateDataKeyWithoutPlaintext(ctx, &sdkkms.GenerateDataKeyWithoutPlaintextInput{KeyId: aws.String(testKeyID),
		KeySpec: types.DataKeySpecAes128, DryRun: aws.Bool(true)}); code(err) != "DryRunOperationException" {
		t.Fatalf("dry run: %v", err)
	}
	if _, err := admin.DescribeKey(ctx, &sdkkms.DescribeKeyInput{KeyId: aws.String("nope")}); code(err) != "NotFoundException" {
		t.Fatalf("a missing key: %v", err)
	}
}

func TestUnsignedAndStaleRequests(t *testing.T) {
	f := start(t, "")
	req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader(`{"KeyId":"x"}`))
	req.Header.Set("X-Amz-Target", "TrentService.DescribeKey")
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an unsigned request: %s", resp.Status)
	}
	if n := f.metrics.Count("kms", "DescribeKey", "MissingAuthenticationTokenException"); n != 1 {
		t.Fatalf("counted %d", n)
	}
	// Credentials from a session that ended are refused as expired.
	now := time.Now()
	store, err := iam.New(account, iam.Config{OIDCProviders: []iam.OIDCProvider{f.issuer.Provider()},
		Roles: []iam.Role{{Name: "app", TrustPolicy: f.issuer.TrustPolicy(account, "*")}}}, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	sess, err := store.AssumeRoleWithWebIdentity(iam.WebIdentityRequest{RoleARN: appRole, SessionName: "s1", DurationSeconds: 900,
		Token: f.issuer.Token(t, "system:serviceaccount:shop:app", "sts.amazonaws.com", time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	srv := httptest.NewServer(kms.NewHandler(f.keys, store, nil))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	if _, err := f.client(sess.AccessKeyID, sess.SecretAccessKey, sess.SessionToken).DescribeKey(t.Context(),
		&sdkkms.DescribeKeyInput{KeyId: aws.String(testKeyID)}); code(err) != "ExpiredTokenException" {
		t.Fatalf("expired credentials: %v", err)
	}
}
