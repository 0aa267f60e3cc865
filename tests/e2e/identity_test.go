//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// The emulated account's identities for the workload-identity scenario.
const (
	e2eAccount  = "123456789012"
	e2eCtrlRole = "arn:aws:iam::123456789012:role/diskplane-controller"
	stsAudience = "sts.amazonaws.com"
)

// tokensFor makes the CSIDriver ask the kubelet for the pods' tokens for
// STS's audience, in the request's secrets or its volume context, and
// restores the CSIDriver's spec when the test ends. What it changes is read
// by the kubelet at each mount attempt.
func tokensFor(t *testing.T, inSecrets bool) {
	t.Helper()
	ctx := t.Context()
	drivers := env.client.StorageV1().CSIDrivers()
	d, err := drivers.Get(ctx, env.driverName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := d.Spec.DeepCopy()
	t.Cleanup(func() {
		d, err := drivers.Get(context.Background(), env.driverName, metav1.GetOptions{})
		if err != nil {
			t.Errorf("read CSIDriver %s: %v", env.driverName, err)
			return
		}
		d.Spec = *original
		if _, err := drivers.Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
			t.Errorf("restore CSIDriver %s: %v", env.driverName, err)
		}
	})
	setTokens(t, inSecrets)
}

// setTokens changes where the kubelet passes the tokens.
func setTokens(t *testing.T, inSecrets bool) {
	t.Helper()
	drivers := env.client.StorageV1().CSIDrivers()
	d, err := drivers.Get(t.Context(), env.driverName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	has := false
	for _, r := range d.Spec.TokenRequests {
		has = has || r.Audience == stsAudience
	}
	if !has {
		d.Spec.TokenRequests = append(d.Spec.TokenRequests, storagev1.TokenRequest{Audience: stsAudience})
	}
	d.Spec.ServiceAccountTokenInSecrets = &inSecrets
	if _, err := drivers.Update(t.Context(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("CSIDriver %s: ask for tokens (in the secrets: %t): %v", env.driverName, inSecrets, err)
	}
}

// declareIdentities gives the emulator the cluster's OIDC provider (its
// issuer and keys, read from the API server), a role that the namespace's
// shop-db service account may assume, access keys for the controller (as
// each way of running it signs its KMS calls: hack/e2e's and the chart's
// local-cluster keys), and a KMS key the controller may wrap with and the
// role may unwrap with.
func declareIdentities(t *testing.T, sc *scenario) (keyARN, roleARN string) {
	t.Helper()
	ctx := t.Context()
	rest := env.client.CoreV1().RESTClient()
	discovery, err := rest.Get().AbsPath("/.well-known/openid-configuration").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(discovery, &doc); err != nil {
		t.Fatal(err)
	}
	jwks, err := rest.Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(doc.Issuer, "https://")
	role := "shop-db-" + sc.suffix
	roleARN = "arn:aws:iam::" + e2eAccount + ":role/" + role
	iamDoc := map[string]any{
		"oidcProviders": []any{map[string]any{"url": doc.Issuer, "clientIds": []string{stsAudience}, "jwks": json.RawMessage(jwks)}},
		"roles": []any{map[string]any{"name": role, "trustPolicy": map[string]any{"Statement": []any{map[string]any{
			"Effect": "Allow", "Principal": map[string]any{"Federated": "arn:aws:iam::" + e2eAccount + ":oidc-provider/" + host},
			"Action":    "sts:AssumeRoleWithWebIdentity",
			"Condition": map[string]any{"StringEquals": map[string]any{host + ":sub": "system:serviceaccount:" + sc.ns + ":shop-db", host + ":aud": stsAudience}},
		}}}}},
		"accessKeys": []any{
			map[string]any{"accessKeyId": "local", "secretAccessKey": "local", "principal": e2eCtrlRole},
			map[string]any{"accessKeyId": "local-cluster", "secretAccessKey": "local-cluster-not-a-secret", "principal": e2eCtrlRole},
		},
	}
	if err := env.emulator.client.SetIAM(ctx, iamDoc); err != nil {
		t.Fatal(err)
	}
	key := "volumes-" + sc.suffix
	if err := env.emulator.client.SetKMSKey(ctx, key, map[string]any{"policy": map[string]any{"Statement": []any{
		map[string]any{"Effect": "Allow", "Principal": map[string]any{"AWS": e2eCtrlRole},
			"Action": []string{"kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncrypt*"}, "Resource": "*"},
		map[string]any{"Effect": "Allow", "Principal": map[string]any{"AWS": roleARN}, "Action": "kms:Decrypt", "Resource": "*"},
	}}}); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("arn:aws:kms:us-east-1:%s:key/%s", e2eAccount, key), roleARN
}

// TestWorkloadIdentity applies examples/encryption-kms with the emulator
// playing STS and KMS for the cluster's own service-account issuer: the
// claim is provisioned with a key KMS wrapped; the kubelet hands the
// plugin each pod's token, in the volume context first, then, once the
// CSIDriver asks for it, in the request's secrets; the pod of the trusted
// service account is unlocked (on a kernel without dm-crypt it stops at
// opening LUKS, with the plugin's error naming its service account and
// where the token was), and a pod of another service account with a claim
// of the same class is refused by STS, the refusal on the pod.
func TestWorkloadIdentity(t *testing.T) {
	sc := newScenario(t)
	tokensFor(t, false)
	keyARN, roleARN := declareIdentities(t, sc)
	m := sc.example("encryption-kms")
	class := m.get(t, "StorageClass")
	set(t, class, keyARN, "parameters", "nodeEncryptionKmsKeyId")
	set(t, class, roleARN, "parameters", "nodeEncryptionRoleArn")
	// The other service account's pod gets a claim of the same class of its
	// own: the kubelet runs one mount at a time per volume, so a pod
	// retrying on the same volume would keep it from ever trying.
	other := m.get(t, "ServiceAccount").DeepCopy()
	other.SetName("shop-web")
	otherClaim := m.get(t, "PersistentVolumeClaim").DeepCopy()
	otherClaim.SetName("web-claim")
	intruder := m.get(t, "Pod").DeepCopy()
	intruder.SetName("web-app")
	set(t, intruder, "shop-web", "spec", "serviceAccountName")
	set(t, intruder, []any{map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": "web-claim"}}}, "spec", "volumes")
	sc.create(append(manifests{other}, append(m, otherClaim, intruder)...)...)

	_, pv := sc.claimBound("kms-claim")
	attrs := pv.Spec.CSI.VolumeAttributes
	if attrs["nodeEncryptionKeySource"] != "kms" || attrs["nodeEncryptionKmsKeyId"] != keyARN || attrs["nodeEncryptionRoleArn"] != roleARN ||
		attrs["nodeEncryptionWrappedKey"] == "" {
		t.Fatalf("PV %s volume attributes %v", pv.Name, attrs)
	}

	refused := sc.podEventWith("web-app", "FailedMount", "PermissionDenied", "STS refused role "+roleARN, "system:serviceaccount:"+sc.ns+":shop-web")
	if testutil.HasDeviceMapper() {
		sc.podReady("kms-app")
		if got := sc.exec("kms-app", "cat /data/log"); !strings.HasPrefix(got, "written at ") {
			t.Fatalf("the pod's log on the encrypted volume holds %q", got)
		}
		sc.waitFor("STS's refusal on the other service account's pod", podTimeout, refused)
		return
	}
	unlocked := func(where string) func(context.Context) (bool, string, error) {
		return sc.podEventWith("kms-app", "FailedMount", "cannot open LUKS volumes",
			"unlocked for system:serviceaccount:"+sc.ns+":shop-db, its token from the request's "+where)
	}
	sc.waitFor("the unlock with the token from the volume context", podTimeout, unlocked("volume context"))
	sc.waitFor("STS's refusal on the other service account's pod", podTimeout, refused)
	setTokens(t, true)
	sc.waitFor("the unlock with the token from the secrets", podTimeout, unlocked("secrets"))
}
