//go:build linux

package node_test

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/iam/iamtest"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
)

const (
	wlAccount  = "123456789012"
	wlPodRole  = "arn:aws:iam::123456789012:role/shop-db"
	wlCtrlRole = "arn:aws:iam::123456789012:role/controller"
)

// kmsNode is an encrypted node whose emulator has STS, KMS and a role for
// the shop/db service account, and whose node service unwraps keys with
// the emulator's STS and KMS.
type kmsNode struct {
	*cloudNode
	issuer *iamtest.Issuer
}

func newKMSNode(t *testing.T) *kmsNode {
	t.Helper()
	n := newEncryptedNode(t)
	issuer := iamtest.NewIssuer(t, "https://kubernetes.default.svc.cluster.local")
	if err := n.env.IAM().SetConfig(iam.Config{
		OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
		Roles:         []iam.Role{{Name: "shop-db", TrustPolicy: issuer.TrustPolicy(wlAccount, iamtest.ServiceAccountSubject("shop", "db"))}},
		AccessKeys:    []iam.AccessKey{{ID: "ctrl", Secret: "ctrl-secret", Principal: wlCtrlRole}},
	}); err != nil {
		t.Fatal(err)
	}
	setKeyPolicy(t, n, true)
	n.svc = n.newService(func(c *node.Config) { c.Unwrapper = datakeys.NewUnwrapper(n.env.AWSConfig("", "")) })
	return &kmsNode{cloudNode: n, issuer: issuer}
}

// setKeyPolicy (re)declares the key, letting the pod's role decrypt or not.
func setKeyPolicy(t *testing.T, n *cloudNode, podMayDecrypt bool) {
	t.Helper()
	doc := `{"Statement":[{"Effect":"Allow","Principal":{"AWS":"` + wlCtrlRole + `"},"Action":"kms:GenerateDataKeyWithoutPlaintext","Resource":"*"}`
	if podMayDecrypt {
		doc += `,{"Effect":"Allow","Principal":{"AWS":"` + wlPodRole + `"},"Action":"kms:Decrypt","Resource":"*"}`
	}
	p, err := iam.ParsePolicy([]byte(doc + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.env.Keys().Declare(kms.KeySpec{ID: "volumes", Policy: p}); err != nil {
		t.Fatal(err)
	}
}

// keyed gives v a key that KMS wraps, as CreateVolume does.
func (n *kmsNode) keyed(v volume) volume {
	n.t.Helper()
	w, err := datakeys.NewWrapper(n.env.AWSConfig("ctrl", "ctrl-secret")).Generate(n.t.Context(), "volumes", datakeys.Binding{VolumeID: v.ID, Namespace: "shop"})
	if err != nil {
		n.t.Fatal(err)
	}
	v.Context = volumecontext.KMSKey{KeyID: w.KeyARN, RoleARN: wlPodRole, Wrapped: w.Ciphertext, Namespace: "shop"}.VolumeContext()
	v.Context["nodeEncryption"] = "luks2"
	return v
}

// publishAs publishes v at target with a token of serviceAccount's pod.
func (n *kmsNode) publishAs(v volume, staging, target, serviceAccount string) error {
	token := n.issuer.Token(n.t, iamtest.ServiceAccountSubject("shop", serviceAccount), "sts.amazonaws.com", time.Hour, "shop", serviceAccount+"-0")
	tokens, _ := json.Marshal(map[string]any{"sts.amazonaws.com": map[string]string{"token": token, "expirationTimestamp": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}})
	vc := maps.Clone(v.Context)
	vc[volumecontext.ServiceAccountTokensKey] = string(tokens)
	_, err := n.svc.NodePublishVolume(n.t.Context(), &csi.NodePublishVolumeRequest{VolumeId: v.ID, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: mountCapability("ext4"), PublishContext: map[string]string{"devicePath": v.DevicePath},
		VolumeContext: vc})
	return err
}

// TestKMSKeyedVolumeOnARealKernel: the unlock with a pod's token, through
// the emulator's STS and KMS, opens a real LUKS2 volume (formatted with the
// unwrapped key, PBKDF2 at its minimum); another service account's pod is
// refused and gets nothing; the last unpublish closes the mapping; a
// revoked republish keeps the mount.
func TestKMSKeyedVolumeOnARealKernel(t *testing.T) {
	n := newKMSNode(t)
	v := n.keyed(n.attachNew(1))
	staging, target := n.kubeletPaths(v)
	target2 := filepath.Join(filepath.Dir(filepath.Dir(target)), "other", "mount")
	if err := os.MkdirAll(filepath.Dir(target2), 0o750); err != nil {
		t.Fatal(err)
	}
	n.mounts = append(n.mounts, target2)
	if err := n.stage(v, staging, mountCapability("ext4")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(mappingPath(v)); !os.IsNotExist(err) || isMounted(t, staging) {
		t.Fatalf("stage opened or mounted the volume (%v)", err)
	}
	if err := n.publishAs(v, staging, target, "db"); err != nil {
		t.Fatal(err)
	}
	if got := blkidType(t, v.Link); got != "crypto_LUKS" {
		t.Fatalf("the volume holds %q", got)
	}
	dump, err := exec.Command("cryptsetup", "luksDump", v.Link).CombinedOutput()
	if err != nil || !strings.Contains(string(dump), "pbkdf2") {
		t.Fatalf("luksDump: %v\n%s", err, dump)
	}
	if err := os.WriteFile(filepath.Join(target, "orders.db"), []byte("kept by KMS"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.syncFS(target)

	err = n.publishAs(v, staging, target2, "web")
	if status.Code(err) != codes.PermissionDenied || isMounted(t, target2) {
		t.Fatalf("another service account's pod: %v, mounted %t", err, isMounted(t, target2))
	}

	n.unpublish(v, target)
	if _, err := os.Lstat(mappingPath(v)); !os.IsNotExist(err) || isMounted(t, staging) {
		t.Fatalf("the last unpublish left the volume open (%v)", err)
	}
	if err := n.publishAs(v, staging, target, "db"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "orders.db")); err != nil || string(b) != "kept by KMS" {
		t.Fatalf("after opening again: %q, %v", b, err)
	}

	setKeyPolicy(t, n.cloudNode, false)
	if err := n.publishAs(v, staging, target, "db"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a revoked republish: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "orders.db")); err != nil || string(b) != "kept by KMS" {
		t.Fatalf("a revoked republish took the data away: %q, %v", b, err)
	}
	n.unpublish(v, target)
	n.unstage(v, staging)
	n.detachAndDelete(v)
}
