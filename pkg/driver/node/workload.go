package node

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/mounter"
)

// DefaultTokenAudience is the audience of the service-account token the
// node exchanges at STS: the one STS expects (IRSA's).
const DefaultTokenAudience = "sts.amazonaws.com"

// unlockMetrics count the unlocks STS or KMS refused.
type unlockMetrics struct {
	refusals *prometheus.CounterVec
}

// Label values of diskplane_volume_unlock_refusals_total.
const (
	callPublish   = "publish"   // a pod's first publication
	callRepublish = "republish" // a published volume's new token: a revocation
	refusedBySTS  = "sts"
	refusedByKMS  = "kms"
)

func newUnlockMetrics(reg prometheus.Registerer) (*unlockMetrics, error) {
	m := &unlockMetrics{refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "diskplane_volume_unlock_refusals_total",
		Help: "Pods' unlocks of volumes whose key KMS wraps that STS or KMS refused, by call (publish, or republish: a published pod's access revoked) and by who refused (sts, kms); each refused token counts once.",
	}, []string{"call", "refused_by"})}
	if reg != nil {
		if err := reg.Register(m.refusals); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// errNoBlockTokens refuses raw block access to a volume whose key KMS
// wraps: the kubelet gives block volumes no token, so no pod could unlock it.
func errNoBlockTokens(volumeID string) error {
	return status.Errorf(codes.InvalidArgument, "volume %s's key is in KMS (%s: %s), which needs the pod's service-account token: "+
		"the kubelet passes none to raw block volumes; use volumeMode: Filesystem", volumeID,
		volumecontext.NodeEncryptionKeySourceKey, volumecontext.KeySourceKMS)
}

// unlockForPublish authorises one publication of a volume whose key KMS
// wraps with the publishing pod's own service-account token: STS exchanges
// the token for the pod's role's credentials and KMS unwraps the volume's
// key with them, every time a pod publishes the volume, also when another
// pod's publication opened it already — no pod rides on another's unlock.
// It then opens the volume's mapping (formatting a blank volume) and
// mounts it at the staging path, where NodeStageVolume, which never gets a
// token, could not.
//
// A republish with the token that authorised the publication is answered
// at once (answered is true) with no call to STS or KMS and no look at a
// mount; so is one with a token refused in the last refusalRecheck. When
// a republish's new token is refused — the pod's access was revoked — the
// answer is PermissionDenied and the pod's mount stays (the kubelet reports
// the error on the pod and unmounts nothing). Otherwise the caller binds
// the target and calls commit once it is published.
func (s *Service) unlockForPublish(ctx context.Context, r publishRequest) (answered bool, commit func(), err error) {
	volumeID, target, staging, readOnly, key := r.volumeID, r.target, r.staging, r.readOnly, r.volume.kms
	tok, err := s.podToken(ctx, r)
	if err != nil {
		return false, nil, err
	}
	pub := publication{volumeID: volumeID, target: target}
	digest := tokenDigest(tok.Token)
	if known, err := s.unlocks.answer(pub, digest, readOnly, time.Now()); known {
		return true, nil, err
	}
	if s.unwrapper == nil {
		return false, nil, status.Errorf(codes.FailedPrecondition, "volume %s's key is in KMS, and this node plugin was started without workload identity", volumeID)
	}
	who := tokenIdentityOf(tok.Token)
	in, err := s.Instance(ctx)
	if err != nil {
		return false, nil, status.Errorf(codes.Unavailable, "node metadata (the region) is not available yet: %v", err)
	}
	plain, err := s.unwrapper.Unwrap(ctx, datakeys.UnwrapRequest{
		Token: tok.Token, RoleARN: key.RoleARN, SessionName: who.sessionName(volumeID),
		KeyID: key.KeyID, Ciphertext: key.Wrapped, Binding: datakeys.Binding{VolumeID: volumeID, Namespace: key.Namespace}, Region: in.Region,
	})
	if err != nil {
		return false, nil, s.unlockRefused(pub, staging, digest, key, who, err)
	}
	defer wipe(plain)
	if err := s.unfence(pub); err != nil {
		return false, nil, err
	}
	klog.V(2).InfoS("Pod authorised to unlock volume", "volumeID", volumeID, "targetPath", target, "serviceAccount", who.subject,
		"role", key.RoleARN, "tokenFrom", tok.Place.String())

	if err := s.openUnlocked(ctx, r, plain); err != nil {
		return false, nil, unlockedContext(err, who, tok)
	}
	return false, func() {
		s.unlocks.authorize(pub, staging, authorization{digest: digest, expires: authorisedUntil(tok.Expiration, who), readOnly: readOnly})
	}, nil
}

// podToken returns the publishing pod's token from where the kubelet puts
// it, as the driver's CSIDriver says; tokens found in the request's other
// field were put there by someone else (a user's node-publish Secret) and
// are ignored, with a line in the log that says so.
func (s *Service) podToken(ctx context.Context, r publishRequest) (volumecontext.ServiceAccountToken, error) {
	volumeID, secrets, vc := r.volumeID, r.secrets, r.volumeContext
	ctx, cancel := context.WithTimeout(ctx, tokenPlaceWait)
	defer cancel()
	inSecrets, err := s.tokenPlace.TokensInSecrets(ctx)
	if err != nil {
		return volumecontext.ServiceAccountToken{}, status.Errorf(codes.Unavailable,
			"volume %s's key is in KMS and is unlocked with the pod's service-account token, but where the kubelet puts it cannot be told: %v", volumeID, err)
	}
	place := volumecontext.TokensInVolumeContext
	if inSecrets {
		place = volumecontext.TokensInSecrets
	}
	elsewhere := volumecontext.TokensElsewhere(secrets, vc, place)
	if elsewhere {
		klog.InfoS("Ignoring service-account tokens in a field of the request where the kubelet does not put them", "volumeID", volumeID,
			"targetPath", r.target, "kubeletPutsThemIn", place.String(), "ignoredIn", place.Other().String())
	}
	tok, err := volumecontext.ServiceAccountTokenFor(secrets, vc, s.audience, place)
	switch {
	case errors.Is(err, volumecontext.ErrNoServiceAccountTokens):
		msg := fmt.Sprintf("volume %s's key is in KMS and is unlocked with the pod's service-account token, but the kubelet passed none in the "+
			"request's %s: the CSIDriver object needs tokenRequests with audience %q (the chart's csiDriver.workloadIdentity.enabled)", volumeID, place, s.audience)
		if elsewhere {
			msg += fmt.Sprintf("; the tokens in its %s are not the kubelet's (the CSIDriver's serviceAccountTokenInSecrets is %t) and were ignored",
				place.Other(), inSecrets)
		}
		return tok, status.Error(codes.InvalidArgument, msg)
	case err != nil:
		return tok, status.Errorf(codes.InvalidArgument, "volume %s: %v", volumeID, err)
	}
	return tok, nil
}

// tokenPlaceWait bounds the wait for the CSIDriver's first read (the node
// plugin just started): the kubelet retries a publish that fails.
const tokenPlaceWait = 15 * time.Second

// openUnlocked makes an authorised volume's mapping open on its verified
// device (formatting a blank device with the unwrapped key), grown to its
// device, and mounted at the staging path.
func (s *Service) openUnlocked(ctx context.Context, r publishRequest, key []byte) error {
	volumeID := r.volumeID
	device, err := s.findDevice(ctx, volumeID, r.devicePath)
	if err != nil {
		return err
	}
	mapping, err := s.openEncrypted(ctx, volumeID, device, mounter.LUKSKey{Secret: key, Random: true}, fromKMS)
	if err != nil {
		return err
	}
	s.unlocks.setGrowPending(volumeID, false)
	return s.mountStaging(ctx, volumeID, mapping, r.staging, r.volume)
}

// unlockRefused turns an Unwrap error into the publish's answer: STS or
// KMS refusing the pod's identity (or a disabled key) is counted, kept for
// refusalRecheck and answered PermissionDenied (FailedPrecondition for the
// key's state) with what an operator must change, and a mounted pod's
// refusal (a revocation) is acted on (revoked); anything else is answered
// as it is and asked again at the next call.
func (s *Service) unlockRefused(pub publication, staging string, digest [32]byte, key volumecontext.KMSKey, who tokenIdentity, err error) error {
	var gErr error
	refusedBy := refusedByKMS
	switch {
	case errors.Is(err, datakeys.ErrTokenRefused):
		refusedBy = refusedBySTS
		gErr = status.Errorf(codes.PermissionDenied, "volume %s: STS refused role %s to %s: %v: the role's trust policy must allow "+
			"sts:AssumeRoleWithWebIdentity to this service account (docs/install.md)", pub.volumeID, key.RoleARN, who.subject, err)
	case errors.Is(err, datakeys.ErrAccessDenied):
		gErr = status.Errorf(codes.PermissionDenied, "volume %s: KMS refused role %s (%s) kms:Decrypt with key %s: %v: the key policy must allow it",
			pub.volumeID, key.RoleARN, who.subject, key.KeyID, err)
	case errors.Is(err, datakeys.ErrKeyDisabled):
		gErr = status.Errorf(codes.FailedPrecondition, "volume %s: KMS key %s is disabled: %v: enable it to unlock the volume", pub.volumeID, key.KeyID, err)
	case errors.Is(err, datakeys.ErrKeyNotFound):
		return status.Errorf(codes.FailedPrecondition, "volume %s: KMS key %s does not exist: %v", pub.volumeID, key.KeyID, err)
	case errors.Is(err, datakeys.ErrWrongVolume):
		return status.Errorf(codes.FailedPrecondition, "volume %s: %v: its volume context's %s is not this volume's (the PersistentVolume was edited or copied?)",
			pub.volumeID, err, volumecontext.NodeEncryptionWrappedKeyKey)
	case errors.Is(err, datakeys.ErrInvalidArgument):
		return status.Errorf(codes.InvalidArgument, "volume %s: %v", pub.volumeID, err)
	case errors.Is(err, datakeys.ErrUnavailable):
		return status.Errorf(codes.Unavailable, "volume %s: %v", pub.volumeID, err)
	default:
		return status.Errorf(codes.Internal, "volume %s: %v", pub.volumeID, err)
	}
	call := callPublish
	if s.publishedAt(pub.target) {
		call = callRepublish
		gErr = s.revoked(pub, staging, key, who, gErr)
	}
	s.metrics.refusals.WithLabelValues(call, refusedBy).Inc()
	s.unlocks.refuse(pub, digest, gErr, time.Now(), call == callRepublish)
	klog.InfoS("Pod's unlock refused", "volumeID", pub.volumeID, "targetPath", pub.target, "call", call, "refusedBy", refusedBy,
		"serviceAccount", who.subject, "role", key.RoleARN, "err", err)
	return gErr
}

// publishedAt reports whether something is mounted at a target path.
func (s *Service) publishedAt(target string) bool {
	mounted, err := s.os.IsMountPoint(target)
	return err == nil && mounted
}

// closeUnlocked closes a volume whose key KMS wraps once its last
// publication this node knows of is gone and nothing else mounts its
// staging path: without a pod authorised to use it, its key leaves the
// kernel. A volume this node did not open since it started is left to
// NodeUnstageVolume.
func (s *Service) closeUnlocked(ctx context.Context, pub publication) error {
	staging, last := s.unlocks.release(pub)
	if !last {
		// The revoked pod is gone: the others get a writable volume back.
		return s.unfence(pub)
	}
	mounted, err := s.stagedAt(staging)
	if err != nil {
		return err
	}
	if mounted {
		refs, err := s.os.MountRefs(staging)
		if err != nil {
			return status.Errorf(codes.Internal, "find where volume %s is published: %v", pub.volumeID, err)
		}
		if len(refs) > 0 {
			// Published before this plugin started, and not republished since.
			klog.V(2).InfoS("Volume still published elsewhere; leaving it open", "volumeID", pub.volumeID, "publications", refs)
			return nil
		}
		if err := s.os.Unmount(staging); err != nil {
			return status.Errorf(codes.Internal, "unmount volume %s from %s: %v", pub.volumeID, staging, err)
		}
	}
	if err := s.closeEncrypted(ctx, pub.volumeID); err != nil {
		return err
	}
	s.unlocks.forget(pub.volumeID)
	klog.V(2).InfoS("Closed volume after its last publication", "volumeID", pub.volumeID, "stagingPath", staging)
	return nil
}

// tokenIdentity is who a token says its pod is, and until when. It is
// read without checking the signature: it only names the STS session and
// the messages, and bounds how long an authorisation STS and KMS gave the
// token is trusted; STS checks the token.
type tokenIdentity struct {
	subject   string // system:serviceaccount:<namespace>:<name>
	namespace string
	pod       string
	podUID    string
	expires   time.Time // the exp claim; zero when the token has none
}

// authorisedUntil is when an authorisation given to a token stops being
// reused: the token's own exp claim, or the kubelet's expirationTimestamp
// when that is sooner. The kubelet's field alone is not trusted: it is
// absent from tokens planted in a user's Secret, and a zero or far-future
// one must not make an authorisation last for ever. A token without an
// exp claim is authorised afresh on every publish (the zero time).
func authorisedUntil(kubelet time.Time, who tokenIdentity) time.Time {
	if !kubelet.IsZero() && kubelet.Before(who.expires) {
		return kubelet
	}
	return who.expires
}

func tokenIdentityOf(token string) tokenIdentity {
	who := tokenIdentity{subject: "the pod's service account"}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return who
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return who
	}
	var claims struct {
		Subject    string  `json:"sub"`
		Expiry     float64 `json:"exp"` // a NumericDate: seconds, maybe fractional
		Kubernetes struct {
			Namespace string `json:"namespace"`
			Pod       struct {
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return who
	}
	if claims.Subject != "" {
		who.subject = claims.Subject
	}
	who.namespace, who.pod, who.podUID = claims.Kubernetes.Namespace, claims.Kubernetes.Pod.Name, claims.Kubernetes.Pod.UID
	if claims.Expiry > 0 {
		who.expires = time.Unix(int64(claims.Expiry), 0)
	}
	return who
}

// sessionChars are what STS allows in a session name.
var sessionChars = regexp.MustCompile(`[^\w+=,.@-]`)

// sessionName names the STS session after the pod (<namespace>.<pod>),
// which CloudTrail records with every KMS call; without a pod in the
// token, after the volume.
func (t tokenIdentity) sessionName(volumeID string) string {
	name := "diskplane." + volumeID
	if t.namespace != "" && t.pod != "" {
		name = t.namespace + "." + t.pod
	}
	name = sessionChars.ReplaceAllString(name, "-")
	return name[:min(len(name), 64)]
}

// unlockedContext adds to an error that came after STS and KMS authorised
// the publication who it was authorised for and where the kubelet put the
// token, for the event on the pod: the unlock itself went through.
func unlockedContext(err error, who tokenIdentity, tok volumecontext.ServiceAccountToken) error {
	st := status.Convert(err)
	return status.Errorf(st.Code(), "%s (the key was unlocked for %s, its token from the request's %s)", st.Message(), who.subject, tok.Place)
}
