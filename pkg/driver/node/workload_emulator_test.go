package node

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/iam/iamtest"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
)

// TestUnlockThroughSTSAndKMS runs the node's unlock through the real SDK
// clients against the emulator's STS and KMS, which verify the pods'
// tokens, the role's trust policy, the key policy and the encryption
// context; the node's OS is the fake.
func TestUnlockThroughSTSAndKMS(t *testing.T) {
	const ctrlRole = "arn:aws:iam::123456789012:role/controller"
	issuer := iamtest.NewIssuer(t, "https://kubernetes.default.svc.cluster.local")
	allowApp := `{"Statement":[
		{"Effect":"Allow","Principal":{"AWS":"` + ctrlRole + `"},"Action":"kms:GenerateDataKeyWithoutPlaintext","Resource":"*"},
		{"Effect":"Allow","Principal":{"AWS":"` + podRole + `"},"Action":"kms:Decrypt","Resource":"*",
		 "Condition":{"StringLike":{"kms:EncryptionContext:diskplane:volume-id":"vol-*"}}}]}`
	policy, err := iam.ParsePolicy([]byte(allowApp))
	if err != nil {
		t.Fatal(err)
	}
	env := emulatortest.Start(t, emulatortest.Options{
		IAM: iam.Config{
			OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
			Roles:         []iam.Role{{Name: "shop-db", TrustPolicy: issuer.TrustPolicy("123456789012", iamtest.ServiceAccountSubject("shop", "db"))}},
			AccessKeys:    []iam.AccessKey{{ID: "ctrl", Secret: "ctrl-secret", Principal: ctrlRole}},
		},
		KMS: kms.Config{Keys: []kms.KeySpec{{ID: "volumes", Policy: policy}}},
	})
	w, err := datakeys.NewWrapper(env.AWSConfig("ctrl", "ctrl-secret")).Generate(t.Context(), "volumes", datakeys.Binding{VolumeID: volID, Namespace: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	vc := volumecontext.KMSKey{KeyID: w.KeyARN, RoleARN: podRole, Wrapped: w.Ciphertext, Namespace: "shop"}.VolumeContext()
	vc["nodeEncryption"] = "luks2"

	f := newFakeOS()
	f.addVolume(volID, volDev, gib)
	s, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: f, ReservedVolumeAttachments: -1,
		Unwrapper: datakeys.NewUnwrapper(env.AWSConfig("", "")), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(path, serviceAccount, pod string) error {
		req := publishReq(mountCap("ext4"))
		req.TargetPath, req.VolumeContext = path, maps.Clone(vc)
		token := issuer.Token(t, iamtest.ServiceAccountSubject("shop", serviceAccount), "sts.amazonaws.com", time.Hour, "shop", pod)
		req.VolumeContext[volumecontext.ServiceAccountTokensKey] = tokensJSON(token, time.Now().Add(time.Hour))
		_, err := s.NodePublishVolume(context.Background(), req)
		return err
	}
	calls := func() (int, int) {
		return env.ServiceCalls("sts", "AssumeRoleWithWebIdentity", ""), env.ServiceCalls("kms", "Decrypt", "")
	}

	if err := publish(target, "db", "db-0"); err != nil {
		t.Fatal(err)
	}
	if a, d := calls(); a != 1 || d != 1 {
		t.Fatalf("first publish: %d AssumeRoleWithWebIdentity, %d Decrypt", a, d)
	}
	if n := len(f.recorded("luksFormat random-key")); n != 1 {
		t.Fatalf("%d formats", n)
	}

	// A pod of another service account: STS refuses it, nothing is opened.
	err = publish(target2, "web", "web-0")
	wantCode(t, err, codes.PermissionDenied)
	if !strings.Contains(err.Error(), "AccessDenied") || !strings.Contains(err.Error(), "system:serviceaccount:shop:web") {
		t.Fatalf("refusal: %v", err)
	}
	if _, ok := f.mounts[target2]; ok {
		t.Fatal("the refused pod got the volume")
	}

	// The key policy stops naming the role: the pod's next token is refused
	// by KMS and its mount stays.
	revoked, err := iam.ParsePolicy([]byte(`{"Statement":[{"Effect":"Allow","Principal":{"AWS":"` + ctrlRole + `"},"Action":"kms:*","Resource":"*"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Keys().Declare(kms.KeySpec{ID: "volumes", Policy: revoked}); err != nil {
		t.Fatal(err)
	}
	err = publish(target, "db", "db-0")
	wantCode(t, err, codes.PermissionDenied)
	if !strings.Contains(err.Error(), "AccessDeniedException") || !strings.Contains(err.Error(), "kms:Decrypt") {
		t.Fatalf("revoked: %v", err)
	}
	if _, ok := f.mounts[target]; !ok {
		t.Fatal("a revoked republish unmounted the pod's volume")
	}
	if got := (&workloadRig{s: s}).refusals(callRepublish, refusedByKMS); got != 1 {
		t.Fatalf("refusals{republish,kms} = %v", got)
	}
}
