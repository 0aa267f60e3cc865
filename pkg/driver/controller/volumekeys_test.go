package controller

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/iam/iamtest"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
)

const (
	testAccount  = "123456789012"
	testAppRole  = "arn:aws:iam::123456789012:role/shop-db"
	testCtrlRole = "arn:aws:iam::123456789012:role/diskplane-controller"
	testKeyARN   = "arn:aws:kms:us-east-1:123456789012:key/volumes"
)

// keyPolicy lets the controller make and re-wrap keys, and the app's role
// decrypt them.
const keyPolicy = `{"Statement":[
	{"Effect":"Allow","Principal":{"AWS":"` + testCtrlRole + `"},"Action":["kms:GenerateDataKeyWithoutPlaintext","kms:ReEncrypt*"],"Resource":"*"},
	{"Effect":"Allow","Principal":{"AWS":"` + testAppRole + `"},"Action":"kms:Decrypt","Resource":"*"}]}`

type keyHarness struct {
	*harness
	issuer *iamtest.Issuer
}

// newKeyHarness is a controller whose credentials (the harness's
// AKIDEMULATOR) are the controller role's, with a KMS key of keyPolicy.
func newKeyHarness(t *testing.T, withKeys bool) *keyHarness {
	t.Helper()
	issuer := iamtest.NewIssuer(t, "https://kubernetes.default.svc.cluster.local")
	policy, err := iam.ParsePolicy([]byte(keyPolicy))
	if err != nil {
		t.Fatal(err)
	}
	env := emulatortest.Start(t, emulatortest.Options{
		IAM: iam.Config{
			OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
			Roles:         []iam.Role{{Name: "shop-db", TrustPolicy: issuer.TrustPolicy(testAccount, iamtest.ServiceAccountSubject("shop", "db"))}},
			AccessKeys:    []iam.AccessKey{{ID: "AKIDEMULATOR", Secret: "emulator-secret", Principal: testCtrlRole}},
		},
		KMS: kms.Config{Keys: []kms.KeySpec{{ID: "volumes", Aliases: []string{"alias/volumes"}, Policy: policy}}},
	})
	h := &harness{t: t, env: env, opts: Options{DriverName: testDriverName, ModifyCoalesceWindow: 20 * time.Millisecond}}
	if withKeys {
		h.opts.Keys = datakeys.NewWrapper(env.AWSConfig("AKIDEMULATOR", "emulator-secret"))
	}
	h.start()
	return &keyHarness{harness: h, issuer: issuer}
}

// kmsReq is a CreateVolume request of a class whose keys KMS wraps, from a
// provisioner that does not pass the claim's namespace.
func kmsReq(name string) *csi.CreateVolumeRequest {
	req := createReq(name, 2, "")
	req.Parameters = map[string]string{"nodeEncryption": "luks2", "nodeEncryptionKeySource": "kms",
		"nodeEncryptionKmsKeyId": "alias/volumes", "nodeEncryptionRoleArn": testAppRole}
	return req
}

// kmsReqIn is kmsReq for a claim in namespace, as the provisioner's
// --extra-create-metadata passes it.
func kmsReqIn(name, namespace string) *csi.CreateVolumeRequest {
	req := kmsReq(name)
	req.Parameters["csi.storage.k8s.io/pvc/namespace"] = namespace
	req.Parameters["csi.storage.k8s.io/pvc/name"] = name
	return req
}

// unwrap unlocks a volume's key as the app's pod would, from its context.
func (h *keyHarness) unwrap(t *testing.T, vol *csi.Volume) []byte {
	t.Helper()
	k, err := volumecontext.KMSKeyOf(vol.GetVolumeContext())
	if err != nil {
		t.Fatal(err)
	}
	u := datakeys.NewUnwrapper(h.env.AWSConfig("", ""))
	key, err := u.Unwrap(h.ctx(), datakeys.UnwrapRequest{
		Token:   h.issuer.Token(t, iamtest.ServiceAccountSubject("shop", "db"), "sts.amazonaws.com", time.Hour),
		RoleARN: k.RoleARN, SessionName: "shop.db-0", KeyID: k.KeyID, Ciphertext: k.Wrapped,
		Binding: datakeys.Binding{VolumeID: vol.GetVolumeId(), Namespace: k.Namespace},
	})
	if err != nil {
		t.Fatalf("unwrap the key of %s: %v", vol.GetVolumeId(), err)
	}
	return key
}

func (h *keyHarness) generated() int {
	return h.env.ServiceCalls("kms", "GenerateDataKeyWithoutPlaintext", "Success")
}

func TestCreateVolumeWrapsAKey(t *testing.T) {
	h := newKeyHarness(t, true)
	vol := h.createVolume(t, kmsReq("pvc-db"))
	ctx := vol.GetVolumeContext()
	for key, want := range map[string]string{
		"nodeEncryption": "luks2", "nodeEncryptionKeySource": "kms", "nodeEncryptionKmsKeyId": testKeyARN, "nodeEncryptionRoleArn": testAppRole,
	} {
		if ctx[key] != want {
			t.Errorf("volume context %s = %q, want %q", key, ctx[key], want)
		}
	}
	if key := h.unwrap(t, vol); len(key) != 32 {
		t.Fatalf("a key of %d bytes", len(key))
	}
	tags := h.volume(t, vol.GetVolumeId()).Tags
	if tags[testDriverName+"/luks-key"] != ctx["nodeEncryptionWrappedKey"] || tags[testDriverName+"/luks-key-kms-key"] != testKeyARN ||
		tags[testDriverName+"/luks-key-volume"] != vol.GetVolumeId() {
		t.Fatalf("volume tags %v", tags)
	}
	// A retry finds the volume and its key: nothing new is made.
	again := h.createVolume(t, kmsReq("pvc-db"))
	if again.GetVolumeId() != vol.GetVolumeId() || again.GetVolumeContext()["nodeEncryptionWrappedKey"] != ctx["nodeEncryptionWrappedKey"] {
		t.Fatalf("the retry answered %v", again)
	}
	if n := h.generated(); n != 1 {
		t.Fatalf("%d keys made for one volume", n)
	}
	if n := h.env.ServiceCalls("kms", "Decrypt", ""); n != 1 {
		t.Fatalf("%d Decrypt calls: the controller must never decrypt (the test's unwrap is the one)", n)
	}
}

// TestCreateVolumeTagsAKeyAfterACrash: a volume an earlier attempt created
// without its key (the controller stopped in between) gets one when the
// provisioner retries.
func TestCreateVolumeTagsAKeyAfterACrash(t *testing.T) {
	h := newKeyHarness(t, true)
	before, err := h.cloud.CreateVolume(h.ctx(), "pvc-crashed", &cloud.CreateVolumeOptions{SizeGiB: 2, Zone: h.env.Zone()})
	if err != nil {
		t.Fatal(err)
	}
	vol := h.createVolume(t, kmsReq("pvc-crashed"))
	if vol.GetVolumeId() != before.ID || h.volume(t, before.ID).Tags[testDriverName+"/luks-key"] == "" {
		t.Fatalf("the retry made %s and tagged %v", vol.GetVolumeId(), h.volume(t, before.ID).Tags)
	}
	h.unwrap(t, vol)
}

func TestCreateVolumeRefusesBeforeCreatingAnything(t *testing.T) {
	block := kmsReq("pvc-block")
	block.VolumeCapabilities = []*csi.VolumeCapability{blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}
	missing := kmsReq("pvc-missing")
	missing.Parameters["nodeEncryptionKmsKeyId"] = "alias/nothing"
	plainSource := kmsReq("pvc-from-plain")
	tests := []struct {
		name     string
		withKeys bool
		req      *csi.CreateVolumeRequest
		prepare  func(h *keyHarness)
		code     codes.Code
		msg      string
	}{
		{name: "raw block", withKeys: true, req: block, code: codes.InvalidArgument, msg: "raw block"},
		{name: "a key that does not exist", withKeys: true, req: missing, code: codes.InvalidArgument, msg: "alias/nothing"},
		{name: "no KMS client", req: kmsReq("pvc-nokms"), code: codes.FailedPrecondition, msg: "no KMS client"},
		{name: "a key the controller may not use", withKeys: true, req: kmsReq("pvc-denied"), code: codes.PermissionDenied, msg: "not authorized",
			prepare: func(h *keyHarness) {
				p, _ := iam.ParsePolicy([]byte(`{"Statement":[{"Effect":"Allow","Principal":{"AWS":"` + testAppRole + `"},"Action":"kms:Decrypt","Resource":"*"}]}`))
				if _, err := h.env.Keys().Declare(kms.KeySpec{ID: "volumes", Aliases: []string{"alias/volumes"}, Policy: p}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "a disabled key", withKeys: true, req: kmsReq("pvc-disabled"), code: codes.FailedPrecondition, msg: "disabled",
			prepare: func(h *keyHarness) {
				off := false
				p, _ := iam.ParsePolicy([]byte(keyPolicy))
				if _, err := h.env.Keys().Declare(kms.KeySpec{ID: "volumes", Aliases: []string{"alias/volumes"}, Policy: p, Enabled: &off}); err != nil {
					t.Fatal(err)
				}
			}},
		// Its source was encrypted with a passphrase: the same layout
		// (luks2:ext4), and no key in KMS.
		{name: "a restore of a snapshot without a wrapped key", withKeys: true, req: plainSource, code: codes.InvalidArgument, msg: "carries no KMS-wrapped LUKS key",
			prepare: func(h *keyHarness) {
				src := h.createVolume(t, withParams(createReq("pvc-plain", 2, ""), map[string]string{"nodeEncryption": "luks2"}))
				snap, err := h.svc.CreateSnapshot(h.ctx(), &csi.CreateSnapshotRequest{Name: "snap-plain", SourceVolumeId: src.GetVolumeId()})
				if err != nil {
					t.Fatal(err)
				}
				plainSource.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
					Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newKeyHarness(t, tc.withKeys)
			if tc.prepare != nil {
				tc.prepare(h)
			}
			volumesBefore := len(h.volumes())
			_, err := h.svc.CreateVolume(h.ctx(), tc.req)
			wantCode(t, err, tc.code, tc.msg)
			if n := len(h.volumes()); n != volumesBefore {
				t.Fatalf("%d volumes after a refused CreateVolume, %d before", n, volumesBefore)
			}
			if n := h.generated(); n != 0 {
				t.Fatalf("%d keys made", n)
			}
		})
	}
}

func TestRestoreAndCloneRewrapTheKey(t *testing.T) {
	h := newKeyHarness(t, true)
	src := h.createVolume(t, kmsReq("pvc-src"))
	key := h.unwrap(t, src)
	snap, err := h.svc.CreateSnapshot(h.ctx(), &csi.CreateSnapshotRequest{Name: "snap-src", SourceVolumeId: src.GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	snapTags := h.env.Cloud().Snapshots()[0].Tags
	if snapTags[testDriverName+"/luks-key"] != src.GetVolumeContext()["nodeEncryptionWrappedKey"] || snapTags[testDriverName+"/luks-key-volume"] != src.GetVolumeId() {
		t.Fatalf("snapshot tags %v", snapTags)
	}
	// The source volume goes: the snapshot alone must be enough.
	if _, err := h.svc.DeleteVolume(h.ctx(), &csi.DeleteVolumeRequest{VolumeId: src.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	restoreReq := kmsReq("pvc-restored")
	restoreReq.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}}
	restored := h.createVolume(t, restoreReq)
	if got := h.unwrap(t, restored); !bytes.Equal(got, key) {
		t.Fatal("the restored volume's key is not its snapshot's")
	}
	if restored.GetVolumeContext()["nodeEncryptionWrappedKey"] == src.GetVolumeContext()["nodeEncryptionWrappedKey"] {
		t.Fatal("the restored volume reuses the source's ciphertext, which is bound to the source")
	}
	cloneReq := kmsReq("pvc-clone")
	cloneReq.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: restored.GetVolumeId()}}}
	clone := h.createVolume(t, cloneReq)
	if got := h.unwrap(t, clone); !bytes.Equal(got, key) {
		t.Fatal("the clone's key is not its source's")
	}
	if n := h.env.ServiceCalls("kms", "ReEncrypt", "Success"); n != 2 {
		t.Fatalf("%d ReEncrypt", n)
	}
}

// TestKeysBoundToTheClaimsNamespace: with the claim's namespace passed, a
// new volume's key is bound to it (its encryption context, a tag, the
// volume context); a snapshot keeps the binding; a restore into another
// namespace is re-wrapped into that namespace, and so is one whose source
// was bound to its volume only (a key wrapped before namespaces).
func TestKeysBoundToTheClaimsNamespace(t *testing.T) {
	h := newKeyHarness(t, true)
	src := h.createVolume(t, kmsReqIn("pvc-src", "shop"))
	if got := src.GetVolumeContext()["nodeEncryptionKeyNamespace"]; got != "shop" {
		t.Fatalf("volume context namespace %q", got)
	}
	if got := h.volume(t, src.GetVolumeId()).Tags[testDriverName+"/luks-key-namespace"]; got != "shop" {
		t.Fatalf("tag luks-key-namespace %q", got)
	}
	key := h.unwrap(t, src)
	k, err := volumecontext.KMSKeyOf(src.GetVolumeContext())
	if err != nil {
		t.Fatal(err)
	}
	unbound := datakeys.NewUnwrapper(h.env.AWSConfig("", ""))
	if _, err := unbound.Unwrap(h.ctx(), datakeys.UnwrapRequest{
		Token:   h.issuer.Token(t, iamtest.ServiceAccountSubject("shop", "db"), "sts.amazonaws.com", time.Hour),
		RoleARN: k.RoleARN, SessionName: "shop.db-0", KeyID: k.KeyID, Ciphertext: k.Wrapped, Binding: datakeys.Binding{VolumeID: src.GetVolumeId()},
	}); !errors.Is(err, datakeys.ErrWrongVolume) {
		t.Fatalf("the key opened without its namespace: %v", err)
	}
	snap, err := h.svc.CreateSnapshot(h.ctx(), &csi.CreateSnapshotRequest{Name: "snap-src", SourceVolumeId: src.GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.env.Cloud().Snapshots()[0].Tags[testDriverName+"/luks-key-namespace"]; got != "shop" {
		t.Fatalf("snapshot tag luks-key-namespace %q", got)
	}
	restoreReq := kmsReqIn("pvc-restored", "bank")
	restoreReq.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}}
	restored := h.createVolume(t, restoreReq)
	if got := restored.GetVolumeContext()["nodeEncryptionKeyNamespace"]; got != "bank" {
		t.Fatalf("the restored volume's key is bound to namespace %q", got)
	}
	if got := h.unwrap(t, restored); !bytes.Equal(got, key) {
		t.Fatal("the restored volume's key is not its snapshot's")
	}

	legacy := h.createVolume(t, kmsReq("pvc-legacy"))
	if _, ok := legacy.GetVolumeContext()["nodeEncryptionKeyNamespace"]; ok {
		t.Fatal("a key wrapped without the claim's namespace names one")
	}
	legacyKey := h.unwrap(t, legacy)
	cloneReq := kmsReqIn("pvc-clone", "bank")
	cloneReq.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: legacy.GetVolumeId()}}}
	clone := h.createVolume(t, cloneReq)
	if got := clone.GetVolumeContext()["nodeEncryptionKeyNamespace"]; got != "bank" {
		t.Fatalf("the clone's key is bound to namespace %q", got)
	}
	if got := h.unwrap(t, clone); !bytes.Equal(got, legacyKey) {
		t.Fatal("the clone's key is not its source's")
	}
}

func TestWrappedKeyTags(t *testing.T) {
	s := &Service{driverName: testDriverName}
	long := bytes.Repeat([]byte{7}, 600) // 800 base64 characters: four tags
	bound := datakeys.Binding{VolumeID: "vol-1", Namespace: "shop"}
	tags, err := s.wrappedKeyTags(taggedKey{wrapped: datakeys.Wrapped{KeyARN: testKeyARN, Ciphertext: long}, binding: bound})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"/luks-key", "/luks-key-2", "/luks-key-3", "/luks-key-4"} {
		if v := tags[testDriverName+k]; v == "" || len(v) > 256 {
			t.Fatalf("tag %s = %q", k, v)
		}
	}
	back, ok, err := s.keyFromTags(tags)
	if err != nil || !ok || !bytes.Equal(back.wrapped.Ciphertext, long) || back.wrapped.KeyARN != testKeyARN || back.binding != bound {
		t.Fatalf("read back: %+v, %v, %v", back.binding, ok, err)
	}
	if _, err := s.wrappedKeyTags(taggedKey{wrapped: datakeys.Wrapped{KeyARN: testKeyARN, Ciphertext: bytes.Repeat([]byte{1}, 2000)}, binding: bound}); err == nil {
		t.Fatal("a ciphertext needing more than 8 tags was accepted")
	}
	if _, ok, _ := s.keyFromTags(map[string]string{"team": "x"}); ok {
		t.Fatal("found a key in tags without one")
	}
	damaged := map[string]string{testDriverName + "/luks-key": "!!" + base64.StdEncoding.EncodeToString(long[:3])}
	if _, _, err := s.keyFromTags(damaged); err == nil || !strings.Contains(err.Error(), "no readable wrapped LUKS key") {
		t.Fatalf("damaged tags: %v", err)
	}
}

// TestKMSErrorCodes: what KMS answers the controller becomes the code the
// provisioner acts on.
func TestKMSErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{datakeys.ErrAccessDenied, codes.PermissionDenied},
		{datakeys.ErrKeyDisabled, codes.FailedPrecondition},
		{datakeys.ErrWrongVolume, codes.FailedPrecondition},
		{datakeys.ErrKeyNotFound, codes.InvalidArgument},
		{datakeys.ErrInvalidArgument, codes.InvalidArgument},
		{datakeys.ErrUnavailable, codes.Unavailable},
		{datakeys.ErrUnexpected, codes.Internal},
	} {
		if got := codeFor(fmt.Errorf("KMS GenerateDataKeyWithoutPlaintext: %w: …", tc.err)); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
}
