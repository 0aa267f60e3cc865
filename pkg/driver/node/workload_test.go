package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

const (
	podRole = "arn:aws:iam::123456789012:role/shop-db"
	kmsKey  = "arn:aws:kms:us-east-1:123456789012:key/volumes"
)

var (
	volumeKey = bytes.Repeat([]byte{0x5a}, 32)
	target2   = filepath.Join(kubeletDir, "pods", "p2", "volumes", "kubernetes.io~csi", "pvc-1", "mount")
)

// fakeUnwrapper plays STS and KMS: it answers volumeKey, or the error set
// for a token, and records every request.
type fakeUnwrapper struct {
	mu      sync.Mutex
	refuse  map[string]error // token -> the error
	calls   []datakeys.UnwrapRequest
	answers [][]byte
}

func (u *fakeUnwrapper) Unwrap(_ context.Context, r datakeys.UnwrapRequest) ([]byte, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls = append(u.calls, r)
	if err := u.refuse[r.Token]; err != nil {
		return nil, err
	}
	key := bytes.Clone(volumeKey)
	u.answers = append(u.answers, key)
	return key, nil
}

func (u *fakeUnwrapper) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.calls)
}

// podToken is a token shaped like a kubelet's, naming its pod, valid for
// an hour.
func podToken(namespace, pod, serviceAccount string) string {
	return podTokenUntil(namespace, pod, serviceAccount, time.Now().Add(time.Hour))
}

// podTokenUntil is podToken with exp at expires (none when zero).
func podTokenUntil(namespace, pod, serviceAccount string, expires time.Time) string {
	claims := map[string]any{
		"sub":           "system:serviceaccount:" + namespace + ":" + serviceAccount,
		"kubernetes.io": map[string]any{"namespace": namespace, "pod": map[string]string{"name": pod}},
	}
	if !expires.IsZero() {
		claims["exp"] = expires.Unix()
	}
	payload, _ := json.Marshal(claims)
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(payload) + ".c2lnbmF0dXJl"
}

// tokensJSON is the value the kubelet passes under
// csi.storage.k8s.io/serviceAccount.tokens.
func tokensJSON(token string, expires time.Time) string {
	b, _ := json.Marshal(map[string]any{"sts.amazonaws.com": map[string]any{"token": token, "expirationTimestamp": expires.UTC().Format(time.RFC3339)}})
	return string(b)
}

func kmsContext() map[string]string {
	ctx := volumecontext.KMSKey{KeyID: kmsKey, RoleARN: podRole, Wrapped: []byte("wrapped-by-kms"), Namespace: "shop"}.VolumeContext()
	ctx["nodeEncryption"] = "luks2"
	return ctx
}

type workloadRig struct {
	s     *Service
	f     *fakeOS
	kms   *fakeUnwrapper
	place *testPlace
	fence bool // the volume context's nodeEncryptionOnRevocation: read-only
}

// testPlace is where the kubelet puts tokens as a test sets it, as an
// operator edits the CSIDriver.
type testPlace struct {
	mu        sync.Mutex
	inSecrets bool
	err       error
}

func (p *testPlace) TokensInSecrets(context.Context) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inSecrets, p.err
}

func (p *testPlace) set(inSecrets bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inSecrets, p.err = inSecrets, err
}

func newWorkloadRig(t *testing.T) *workloadRig {
	t.Helper()
	f := newFakeOS()
	f.addVolume(volID, volDev, gib)
	u := &fakeUnwrapper{refuse: map[string]error{}}
	place := &testPlace{inSecrets: true}
	s, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: f, ReservedVolumeAttachments: -1,
		Unwrapper: u, TokenPlace: place, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return &workloadRig{s: s, f: f, kms: u, place: place}
}

// publish publishes the volume at path with token, in the request's
// secrets (as with serviceAccountTokenInSecrets) or its volume context,
// where the rig's CSIDriver then says the kubelet puts them.
func (r *workloadRig) publish(path, token string, inSecrets bool) error {
	r.place.set(inSecrets, nil)
	req := publishReq(mountCap("ext4"))
	req.TargetPath = path
	req.VolumeContext = kmsContext()
	if r.fence {
		req.VolumeContext[volumecontext.NodeEncryptionOnRevocationKey] = volumecontext.RevocationReadOnly
	}
	tokens := tokensJSON(token, time.Now().Add(time.Hour))
	if inSecrets {
		req.Secrets = map[string]string{volumecontext.ServiceAccountTokensKey: tokens}
	} else {
		req.VolumeContext[volumecontext.ServiceAccountTokensKey] = tokens
	}
	_, err := r.s.NodePublishVolume(context.Background(), req)
	return err
}

func (r *workloadRig) stage(t *testing.T) {
	t.Helper()
	req := stageReq(mountCap("ext4"))
	req.VolumeContext = kmsContext()
	if _, err := r.s.NodeStageVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

func (r *workloadRig) refusals(call, by string) float64 {
	var m dto.Metric
	if err := r.s.metrics.refusals.WithLabelValues(call, by).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// changes are the calls that changed something on the node, directories
// made for mount points left out.
func (r *workloadRig) changes() []string {
	return slices.DeleteFunc(r.f.recorded(""), func(c string) bool { return strings.HasPrefix(c, "MakeDir ") })
}

func (r *workloadRig) mounted(path string) bool {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	_, ok := r.f.mounts[path]
	return ok
}

// TestStageOnlyVerifies: NodeStageVolume gets no token, so it opens and
// mounts nothing; NodePublishVolume does.
func TestStageOnlyVerifies(t *testing.T) {
	r := newWorkloadRig(t)
	r.stage(t)
	if calls := r.changes(); len(calls) != 0 {
		t.Fatalf("stage did %q", calls)
	}
	block := stageReq(blockCap())
	block.VolumeContext = kmsContext()
	_, err := r.s.NodeStageVolume(context.Background(), block)
	wantCode(t, err, codes.InvalidArgument)
	bad := stageReq(mountCap("ext4"))
	bad.VolumeContext = kmsContext()
	delete(bad.VolumeContext, volumecontext.NodeEncryptionWrappedKeyKey)
	_, err = r.s.NodeStageVolume(context.Background(), bad)
	wantCode(t, err, codes.InvalidArgument)
	missing := stageReq(mountCap("ext4"))
	missing.VolumeContext, missing.VolumeId = kmsContext(), "vol-00000000000000001"
	_, err = r.s.NodeStageVolume(context.Background(), missing)
	wantCode(t, err, codes.NotFound)
}

func TestPublishUnlocksWithEachPodsToken(t *testing.T) {
	r := newWorkloadRig(t)
	r.stage(t)
	mapping := fakeMapping(volID)
	tokenA := podToken("shop", "db-0", "db")
	if err := r.publish(target, tokenA, true); err != nil {
		t.Fatal(err)
	}
	want := []string{"luksFormat random-key " + volDev, "luksOpen " + volDev + " " + mapping, "mkfs.ext4  " + mapping,
		"mount -t ext4 -o  " + mapping + " " + staging, "bind -o  " + staging + " " + target}
	if got := r.changes(); !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	if r.f.luksKeys[volDev] != string(volumeKey) {
		t.Fatal("the volume was not formatted with the key KMS unwrapped")
	}
	call := r.kms.calls[0]
	if call.Token != tokenA || call.RoleARN != podRole || call.KeyID != kmsKey || call.Binding != (datakeys.Binding{VolumeID: volID, Namespace: "shop"}) ||
		string(call.Ciphertext) != "wrapped-by-kms" || call.SessionName != "shop.db-0" || call.Region != "us-east-1" {
		t.Fatalf("unwrap request %+v", call)
	}
	if !bytes.Equal(r.kms.answers[0], make([]byte, 32)) {
		t.Fatal("the plaintext key was not cleared after use")
	}

	// A republish with the same token answers from memory: no STS or KMS
	// call, no look at a mount (the fake's mount table is emptied, and a
	// look would find the volume unstaged).
	saved := r.f.mounts
	r.f.mounts = map[string]fakeMount{}
	for range 3 {
		if err := r.publish(target, tokenA, true); err != nil {
			t.Fatalf("republish: %v", err)
		}
	}
	r.f.mounts = saved
	if n := r.kms.count(); n != 1 {
		t.Fatalf("%d unwraps, want 1", n)
	}

	// Another pod on the node: authorised with its own token (the token in
	// the volume context this time), the open mapping reused.
	before := len(r.changes())
	if err := r.publish(target2, podToken("shop", "db-1", "db"), false); err != nil {
		t.Fatal(err)
	}
	if n := r.kms.count(); n != 2 {
		t.Fatalf("%d unwraps: the second pod rode on the first one's unlock", n)
	}
	if got := r.changes()[before:]; !slices.Equal(got, []string{"bind -o  " + staging + " " + target2}) {
		t.Fatalf("the second publication did %q", got)
	}

	// The last unpublish closes the volume; the one before does not.
	if _, err := r.s.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if !r.mounted(staging) || len(r.f.recorded("luksClose")) != 0 {
		t.Fatal("the first unpublish closed a volume another pod uses")
	}
	if _, err := r.s.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target2}); err != nil {
		t.Fatal(err)
	}
	if r.mounted(staging) || len(r.f.recorded("luksClose "+mapping)) != 1 {
		t.Fatalf("after the last unpublish: %q", r.changes())
	}
	if _, err := r.s.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	// A pod that comes back unlocks and opens it again: its header is
	// opened, not formatted.
	if err := r.publish(target, podToken("shop", "db-0", "db"), true); err != nil {
		t.Fatal(err)
	}
	if n := len(r.f.recorded("luksFormat")); n != 1 {
		t.Fatalf("%d formats", n)
	}
}

func TestRefusedPodsOpenNothing(t *testing.T) {
	r := newWorkloadRig(t)
	r.stage(t)
	intruder := podToken("shop", "intruder", "intruder")
	r.kms.refuse[intruder] = fmt.Errorf("STS AssumeRoleWithWebIdentity of role %s: %w: AccessDenied: Not authorized", podRole, datakeys.ErrTokenRefused)
	err := r.publish(target, intruder, true)
	wantCode(t, err, codes.PermissionDenied)
	for _, want := range []string{"STS refused role " + podRole, "system:serviceaccount:shop:intruder", "trust policy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), intruder) {
		t.Fatal("the refusal holds the token")
	}
	if calls := r.changes(); len(calls) != 0 {
		t.Fatalf("a refused pod made the node do %q", calls)
	}
	if n := r.refusals(callPublish, refusedBySTS); n != 1 {
		t.Fatalf("refusals{publish,sts} = %v", n)
	}
	// The kubelet retries: the same token gets the same answer without a
	// new STS call, for a while.
	wantCode(t, r.publish(target, intruder, true), codes.PermissionDenied)
	if n := r.kms.count(); n != 1 {
		t.Fatalf("%d unwraps for one refused token", n)
	}

	// The owner publishes; the intruder, refused by KMS this time, still
	// cannot bind the open volume.
	if err := r.publish(target, podToken("shop", "db-0", "db"), true); err != nil {
		t.Fatal(err)
	}
	other := podToken("shop", "other", "other")
	r.kms.refuse[other] = fmt.Errorf("KMS Decrypt: %w: AccessDeniedException: User: … is not authorized", datakeys.ErrAccessDenied)
	wantCode(t, r.publish(target2, other, true), codes.PermissionDenied)
	if r.mounted(target2) {
		t.Fatal("a pod KMS refused got the open volume")
	}
	if n := r.refusals(callPublish, refusedByKMS); n != 1 {
		t.Fatalf("refusals{publish,kms} = %v", n)
	}
}

func TestRevokedRepublishKeepsTheMount(t *testing.T) {
	r := newWorkloadRig(t)
	r.stage(t)
	if err := r.publish(target, podToken("shop", "db-0", "db"), true); err != nil {
		t.Fatal(err)
	}
	// The kubelet refreshes the token; meanwhile the role lost kms:Decrypt.
	fresh := podToken("shop", "db-0", "db") + "x"
	r.kms.refuse[fresh] = fmt.Errorf("KMS Decrypt: %w: AccessDeniedException", datakeys.ErrAccessDenied)
	for range 5 {
		err := r.publish(target, fresh, true)
		wantCode(t, err, codes.PermissionDenied)
	}
	if !r.mounted(target) || !r.mounted(staging) || len(r.f.recorded("umount")) != 0 || len(r.f.recorded("luksClose")) != 0 {
		t.Fatalf("a revoked republish unmounted: %q", r.changes())
	}
	if n := r.refusals(callRepublish, refusedByKMS); n != 1 {
		t.Fatalf("refusals{republish,kms} = %v: each refused token counts once", n)
	}
	if n := r.kms.count(); n != 2 {
		t.Fatalf("%d unwraps: a refused token is not asked about again at once", n)
	}
	// Access restored and a new token: authorised again.
	if err := r.publish(target, fresh+"y", true); err != nil {
		t.Fatal(err)
	}
	// A disabled key is a refusal too, answered FailedPrecondition.
	disabled := fresh + "z"
	r.kms.refuse[disabled] = fmt.Errorf("KMS Decrypt: %w: DisabledException", datakeys.ErrKeyDisabled)
	wantCode(t, r.publish(target, disabled, true), codes.FailedPrecondition)
	if n := r.refusals(callRepublish, refusedByKMS); n != 2 {
		t.Fatalf("refusals{republish,kms} = %v", n)
	}
}

func TestUnlockErrors(t *testing.T) {
	tests := []struct {
		name    string
		refuse  error
		mutate  func(req *csi.NodePublishVolumeRequest)
		code    codes.Code
		message string
	}{
		{name: "no tokens", code: codes.InvalidArgument, message: "tokenRequests with audience \"sts.amazonaws.com\"",
			mutate: func(req *csi.NodePublishVolumeRequest) { req.Secrets = nil }},
		{name: "tokens for another audience", code: codes.InvalidArgument, message: "none for \"sts.amazonaws.com\"",
			mutate: func(req *csi.NodePublishVolumeRequest) {
				req.Secrets = map[string]string{volumecontext.ServiceAccountTokensKey: `{"vault":{"token":"x.y.z"}}`}
			}},
		{name: "no wrapped key", code: codes.InvalidArgument, message: "nodeEncryptionWrappedKey",
			mutate: func(req *csi.NodePublishVolumeRequest) {
				delete(req.VolumeContext, volumecontext.NodeEncryptionWrappedKeyKey)
			}},
		{name: "block", code: codes.InvalidArgument, message: "raw block",
			mutate: func(req *csi.NodePublishVolumeRequest) { req.VolumeCapability = blockCap() }},
		{name: "KMS unreachable", refuse: fmt.Errorf("%w: dial tcp", datakeys.ErrUnavailable), code: codes.Unavailable},
		{name: "another volume's wrapped key", refuse: fmt.Errorf("%w: InvalidCiphertextException", datakeys.ErrWrongVolume),
			code: codes.FailedPrecondition, message: "is not this volume's"},
		{name: "a key that is gone", refuse: fmt.Errorf("%w: NotFoundException", datakeys.ErrKeyNotFound), code: codes.FailedPrecondition, message: "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newWorkloadRig(t)
			token := podToken("shop", "db-0", "db")
			if tc.refuse != nil {
				r.kms.refuse[token] = tc.refuse
			}
			req := publishReq(mountCap("ext4"))
			req.VolumeContext = kmsContext()
			req.Secrets = map[string]string{volumecontext.ServiceAccountTokensKey: tokensJSON(token, time.Now().Add(time.Hour))}
			if tc.mutate != nil {
				tc.mutate(req)
			}
			_, err := r.s.NodePublishVolume(context.Background(), req)
			wantCode(t, err, tc.code)
			if !strings.Contains(status.Convert(err).Message(), tc.message) {
				t.Fatalf("message %q lacks %q", status.Convert(err).Message(), tc.message)
			}
			if calls := r.changes(); len(calls) != 0 {
				t.Fatalf("a failed publish did %q", calls)
			}
			if r.refusals(callPublish, refusedByKMS)+r.refusals(callPublish, refusedBySTS) != 0 {
				t.Fatal("a failure that is no refusal was counted as one")
			}
		})
	}
}

func TestExpiredOrChangedAuthorisationAsksAgain(t *testing.T) {
	r := newWorkloadRig(t)
	r.stage(t)
	token := podToken("shop", "db-0", "db")
	req := publishReq(mountCap("ext4"))
	req.VolumeContext = kmsContext()
	req.Secrets = map[string]string{volumecontext.ServiceAccountTokensKey: tokensJSON(token, time.Now().Add(-time.Second))}
	for range 2 {
		if _, err := r.s.NodePublishVolume(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.kms.count(); n != 2 {
		t.Fatalf("%d unwraps: a token past its expiry authorised a republish", n)
	}
	req.Readonly = true
	_, err := r.s.NodePublishVolume(context.Background(), req)
	wantCode(t, err, codes.AlreadyExists)
}

// TestAuthorisationEndsWithTheToken: an authorisation is reused no longer
// than the token's own exp claim, whatever the kubelet's
// expirationTimestamp says (zero, or years ahead), and not at all for a
// token without one.
func TestAuthorisationEndsWithTheToken(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name         string
		exp, kubelet time.Time
		wantUnwraps  int // of two publishes in a row
	}{
		{name: "the kubelet's timestamp is sooner", exp: now.Add(time.Hour), kubelet: now.Add(time.Minute), wantUnwraps: 1},
		{name: "no kubelet timestamp", exp: now.Add(time.Hour), wantUnwraps: 1},
		{name: "expired by its claim, the kubelet says years ahead", exp: now.Add(-time.Second), kubelet: now.Add(10 * 365 * 24 * time.Hour), wantUnwraps: 2},
		{name: "expired by its claim, no kubelet timestamp", exp: now.Add(-time.Second), wantUnwraps: 2},
		{name: "no exp claim", kubelet: now.Add(time.Hour), wantUnwraps: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newWorkloadRig(t)
			r.stage(t)
			req := publishReq(mountCap("ext4"))
			req.VolumeContext = kmsContext()
			tokens := map[string]any{"token": podTokenUntil("shop", "db-0", "db", tc.exp)}
			if !tc.kubelet.IsZero() {
				tokens["expirationTimestamp"] = tc.kubelet.UTC().Format(time.RFC3339)
			}
			b, _ := json.Marshal(map[string]any{"sts.amazonaws.com": tokens})
			req.Secrets = map[string]string{volumecontext.ServiceAccountTokensKey: string(b)}
			for range 2 {
				if _, err := r.s.NodePublishVolume(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			if n := r.kms.count(); n != tc.wantUnwraps {
				t.Fatalf("%d unwraps, want %d", n, tc.wantUnwraps)
			}
		})
	}
}

// TestGrowthWaitsForAPublish: NodeExpandVolume has no token, so it leaves
// the mapping's growth to the next publish, which unwraps the key even for
// a token already authorised.
func TestGrowthWaitsForAPublish(t *testing.T) {
	r := newWorkloadRig(t)
	r.stage(t)
	token := podToken("shop", "db-0", "db")
	if err := r.publish(target, token, true); err != nil {
		t.Fatal(err)
	}
	r.f.deviceSizes[volDev] = 2 * gib // ControllerExpandVolume grew it
	expand := &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target, StagingTargetPath: staging, VolumeCapability: mountCap("ext4"),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}}
	_, err := r.s.NodeExpandVolume(context.Background(), expand)
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "next NodePublishVolume") {
		t.Fatalf("message: %v", err)
	}
	if err := r.publish(target, token, true); err != nil {
		t.Fatal(err)
	}
	if n := r.kms.count(); n != 2 {
		t.Fatalf("%d unwraps: the republish did not fetch the key to grow the mapping", n)
	}
	if n := len(r.f.recorded("cryptsetup resize")); n != 1 {
		t.Fatalf("%d mapping resizes", n)
	}
	out, err := r.s.NodeExpandVolume(context.Background(), expand)
	if err != nil || out.GetCapacityBytes() != 2*gib {
		t.Fatalf("the kubelet's retry: %v, %v", out, err)
	}
	if err := r.publish(target, token, true); err != nil || r.kms.count() != 2 {
		t.Fatalf("after growing, a republish asked again: %v, %d", err, r.kms.count())
	}
}

// TestRestartedPluginAuthorisesAgain: a restarted plugin keeps nothing;
// the first republish asks STS and KMS and finds everything in place.
func TestRestartedPluginAuthorisesAgain(t *testing.T) {
	r := newWorkloadRig(t)
	r.stage(t)
	token := podToken("shop", "db-0", "db")
	if err := r.publish(target, token, true); err != nil {
		t.Fatal(err)
	}
	restarted, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: r.f, ReservedVolumeAttachments: -1, Unwrapper: r.kms, TokenPlace: r.place})
	if err != nil {
		t.Fatal(err)
	}
	r.s = restarted
	before := len(r.changes())
	if err := r.publish(target, token, true); err != nil {
		t.Fatal(err)
	}
	if r.kms.count() != 2 || len(r.changes()) != before {
		t.Fatalf("after a restart: %d unwraps, calls %q", r.kms.count(), r.changes()[before:])
	}
	// Without an unwrapper, a node refuses such volumes.
	plain, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: r.f, ReservedVolumeAttachments: -1, TokenPlace: r.place})
	if err != nil {
		t.Fatal(err)
	}
	r.s = plain
	wantCode(t, r.publish(target2, token, true), codes.FailedPrecondition)
}

func TestSessionName(t *testing.T) {
	for _, tc := range []struct {
		token, want string
	}{
		{podToken("shop", "db-0", "db"), "shop.db-0"},
		{podToken(strings.Repeat("n", 40), strings.Repeat("p", 40), "sa"), strings.Repeat("n", 40) + "." + strings.Repeat("p", 23)},
		{"not-a-jwt", "diskplane." + volID},
		{"a." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"x"}`)) + ".c", "diskplane." + volID},
	} {
		if got := tokenIdentityOf(tc.token).sessionName(volID); got != tc.want {
			t.Errorf("sessionName = %q, want %q", got, tc.want)
		}
	}
}

// TestErrorsAfterTheUnlockSayWhoUnlocked: a failure after STS and KMS
// authorised the pod names its service account and where the token was.
func TestErrorsAfterTheUnlockSayWhoUnlocked(t *testing.T) {
	r := newWorkloadRig(t)
	r.f.failOn["FormatAndMount"] = fmt.Errorf("mkfs failed")
	err := r.publish(target, podToken("shop", "db-0", "db"), false)
	wantCode(t, err, codes.Internal)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "mkfs failed") ||
		!strings.Contains(msg, "unlocked for system:serviceaccount:shop:db, its token from the request's volume context") {
		t.Fatalf("message %q", msg)
	}
}

// BenchmarkRepublishAuthorised measures what a republish with a token that
// authorised the publication costs the node (no STS or KMS call, no mount
// look): go test -run - -bench RepublishAuthorised ./pkg/driver/node.
func BenchmarkRepublishAuthorised(b *testing.B) {
	f := newFakeOS()
	f.addVolume(volID, volDev, gib)
	u := &fakeUnwrapper{refuse: map[string]error{}}
	s, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: f, ReservedVolumeAttachments: -1, Unwrapper: u})
	if err != nil {
		b.Fatal(err)
	}
	req := publishReq(mountCap("ext4"))
	req.VolumeContext = kmsContext()
	req.Secrets = map[string]string{volumecontext.ServiceAccountTokensKey: tokensJSON(podToken("shop", "db-0", "db"), time.Now().Add(time.Hour))}
	if _, err := s.NodePublishVolume(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.NodePublishVolume(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	if len(u.calls) != 1 {
		b.Fatalf("%d unwraps", len(u.calls))
	}
}
