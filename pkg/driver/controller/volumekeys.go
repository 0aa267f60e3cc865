package controller

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/driver/parameters"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

// The tags that keep a volume's wrapped LUKS key (nodeEncryptionKeySource:
// kms) with the volume and its snapshots, under the driver's reserved
// prefix (<driver name>/…): the volume context has it too, but a snapshot
// outlives its volume's PersistentVolume, and a restore needs it.
const (
	// tagWrappedKey holds the base64 ciphertext; when it is longer than a
	// tag value may be, it goes on in tagWrappedKey-2, -3 ….
	tagWrappedKey = "luks-key"
	// tagWrappingKey holds the ARN of the KMS key that wraps it.
	tagWrappingKey = "luks-key-kms-key"
	// tagKeyVolume holds the volume ID its encryption context names; on a
	// volume, its own ID, on a snapshot, its source's.
	tagKeyVolume = "luks-key-volume"
	// tagKeyNamespace holds the namespace its encryption context names (the
	// claim's), when it names one.
	tagKeyNamespace = "luks-key-namespace"
	// maxTagValue is EC2's limit on a tag value, in characters.
	maxTagValue = 256
	// maxWrappedKeyTags bounds how many tags one ciphertext may take.
	maxWrappedKeyTags = 8
)

// errNoWrappedKey is what a restore or clone into a class whose keys KMS
// wraps gets when its source carries no wrapped key.
var errNoWrappedKey = errors.New("carries no KMS-wrapped LUKS key")

// dryRunVolumeID stands in for the volume a dry run is for, which does not
// exist yet: KMS checks the caller may make a key with an encryption
// context of this shape.
const dryRunVolumeID = "vol-00000000000000000"

// taggedKey is a wrapped key as a volume's or snapshot's tags keep it:
// the ciphertext, and what its encryption context binds it to.
type taggedKey struct {
	wrapped datakeys.Wrapped
	binding datakeys.Binding
}

// checkVolumeKey runs before anything is created for a class whose LUKS key
// KMS wraps: raw block access is refused (the kubelet sends a pod's token
// only to a filesystem volume's NodePublishVolume), a restore's or clone's
// source must carry a wrapped key, and KMS is asked, in a dry run, whether
// this controller may make (or re-wrap) the key for the claim's namespace,
// so that a wrong key, policy or region fails here instead of leaving
// behind a volume that CreateVolume never returns.
func (s *Service) checkVolumeKey(ctx context.Context, key parameters.NodeEncryptionKey, caps capabilitySet, src *csi.VolumeContentSource,
	namespace string) (*taggedKey, error) {
	if !key.KMS() {
		return nil, nil
	}
	if caps.block {
		return nil, invalidArgument("%s: %s cannot encrypt a raw block volume: the kubelet passes a pod's service-account token only to "+
			"filesystem volumes, so no pod could unlock it; use volumeMode: Filesystem, or %s: %s",
			parameters.KeyNodeEncryptionKeySource, volumecontext.KeySourceKMS, parameters.KeyNodeEncryptionKeySource, volumecontext.KeySourceSecret)
	}
	if s.keys == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: %s: this controller has no KMS client", parameters.KeyNodeEncryptionKeySource, volumecontext.KeySourceKMS)
	}
	source, err := s.sourceKey(ctx, src)
	if err != nil {
		return nil, err
	}
	var from *datakeys.Wrapped
	var fromBinding datakeys.Binding
	if source != nil {
		from, fromBinding = &source.wrapped, source.binding
	}
	if err := s.keys.Check(ctx, key.KMSKeyID, from, fromBinding, datakeys.Binding{VolumeID: dryRunVolumeID, Namespace: namespace}); err != nil {
		return nil, failed(err, "KMS key %s", key.KMSKeyID)
	}
	return source, nil
}

// sourceKey reads the wrapped key a snapshot or volume to restore or clone
// carries in its tags; nil without a source.
func (s *Service) sourceKey(ctx context.Context, src *csi.VolumeContentSource) (*taggedKey, error) {
	var tags map[string]string
	var from string
	switch {
	case src == nil:
		return nil, nil
	case src.GetSnapshot() != nil:
		id := src.GetSnapshot().GetSnapshotId()
		snap, err := s.cloud.GetSnapshot(ctx, id)
		if err != nil {
			return nil, failed(err, "source snapshot %s", id)
		}
		tags, from = snap.Tags, "snapshot "+id
	case src.GetVolume() != nil:
		id := src.GetVolume().GetVolumeId()
		vol, err := s.cloud.GetVolume(ctx, id)
		if err != nil {
			return nil, failed(err, "source volume %s", id)
		}
		tags, from = vol.Tags, "volume "+id
	default:
		return nil, nil
	}
	k, ok, err := s.keyFromTags(tags)
	switch {
	case err != nil:
		return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", from, err)
	case !ok:
		return nil, invalidArgument("%s %v: it is not of a volume whose LUKS key KMS wraps (%s: %s), and this class encrypts "+
			"only such volumes (a plain or passphrase-encrypted volume cannot be re-encrypted in place)",
			from, errNoWrappedKey, parameters.KeyNodeEncryptionKeySource, volumecontext.KeySourceKMS)
	}
	return &k, nil
}

// volumeKeyContext makes sure vol has its wrapped LUKS key, in a tag and in
// the volume context returned: the one an earlier attempt tagged it with,
// or a new one bound to vol and the claim's namespace (re-wrapped from the
// source's for a restore or clone, into the new claim's namespace).
func (s *Service) volumeKeyContext(ctx context.Context, vol *cloud.Volume, key parameters.NodeEncryptionKey, source *taggedKey,
	namespace string) (map[string]string, error) {
	if !key.KMS() {
		return nil, nil
	}
	k, ok, err := s.keyFromTags(vol.Tags)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", vol.ID, err)
	}
	if !ok {
		k.binding = datakeys.Binding{VolumeID: vol.ID, Namespace: namespace}
		if source != nil {
			k.wrapped, err = s.keys.Rewrap(ctx, source.wrapped, source.binding, key.KMSKeyID, k.binding)
		} else {
			k.wrapped, err = s.keys.Generate(ctx, key.KMSKeyID, k.binding)
		}
		if err != nil {
			return nil, failed(err, "wrap the LUKS key of volume %s", vol.ID)
		}
		tags, err := s.wrappedKeyTags(k)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: %v", vol.ID, err)
		}
		if err := s.cloud.UpdateTags(ctx, vol.ID, tags, nil); err != nil {
			return nil, failed(err, "tag volume %s with its wrapped LUKS key", vol.ID)
		}
		klog.V(2).InfoS("Wrapped the volume's LUKS key", "volumeID", vol.ID, "namespace", namespace, "kmsKey", k.wrapped.KeyARN, "rewrapped", source != nil)
	}
	// The key an earlier attempt tagged the volume with keeps the binding
	// it was wrapped with: KMS decrypts it only with that context.
	return volumecontext.KMSKey{KeyID: k.wrapped.KeyARN, RoleARN: key.RoleARN, Wrapped: k.wrapped.Ciphertext,
		Namespace: k.binding.Namespace, FenceOnRevocation: key.FenceOnRevocation}.VolumeContext(), nil
}

// snapshotSourceTags are the tags a snapshot of sourceID carries from its
// volume: the layout it was made for (tagLayout), and what a restore needs
// to get its key: the wrapped key and the volume and namespace its
// encryption context names.
func (s *Service) snapshotSourceTags(ctx context.Context, sourceID string) (map[string]string, error) {
	vol, err := s.cloud.GetVolume(ctx, sourceID)
	if err != nil {
		return nil, failed(err, "source volume %s", sourceID)
	}
	tags := map[string]string{}
	if layout := vol.Tags[s.tagKey(tagLayout)]; layout != "" {
		tags[s.tagKey(tagLayout)] = layout
	}
	k, ok, err := s.keyFromTags(vol.Tags)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "source volume %s: %v", sourceID, err)
	}
	if !ok {
		return tags, nil
	}
	keyTags, err := s.wrappedKeyTags(k)
	if err != nil {
		return nil, err
	}
	return mergeMaps(tags, keyTags), nil
}

// tagKey is a tag key under the driver's reserved prefix.
func (s *Service) tagKey(name string) string { return s.driverName + "/" + name }

// wrappedKeyTags renders a wrapped key into tags, the ciphertext split
// over as many tags as its length needs.
func (s *Service) wrappedKeyTags(k taggedKey) (map[string]string, error) {
	w := k.wrapped
	if len(w.KeyARN) > maxTagValue {
		return nil, fmt.Errorf("the KMS key's ARN %s is longer than a tag value may be", w.KeyARN)
	}
	tags := map[string]string{s.tagKey(tagWrappingKey): w.KeyARN, s.tagKey(tagKeyVolume): k.binding.VolumeID}
	if k.binding.Namespace != "" {
		tags[s.tagKey(tagKeyNamespace)] = k.binding.Namespace
	}
	text := base64.StdEncoding.EncodeToString(w.Ciphertext)
	for i := 1; text != ""; i++ {
		if i > maxWrappedKeyTags {
			return nil, fmt.Errorf("the wrapped key (%d bytes) needs more than %d tags", len(w.Ciphertext), maxWrappedKeyTags)
		}
		n := min(len(text), maxTagValue)
		tags[s.wrappedKeyTag(i)] = text[:n]
		text = text[n:]
	}
	return tags, nil
}

func (s *Service) wrappedKeyTag(i int) string {
	if i == 1 {
		return s.tagKey(tagWrappedKey)
	}
	return s.tagKey(tagWrappedKey + "-" + strconv.Itoa(i))
}

// keyFromTags reads a wrapped key and its binding back from a resource's
// tags: false when it has none, an error when what it has is damaged.
func (s *Service) keyFromTags(tags map[string]string) (taggedKey, bool, error) {
	first, ok := tags[s.wrappedKeyTag(1)]
	if !ok {
		return taggedKey{}, false, nil
	}
	var text strings.Builder
	text.WriteString(first)
	for i := 2; i <= maxWrappedKeyTags; i++ {
		part, ok := tags[s.wrappedKeyTag(i)]
		if !ok {
			break
		}
		text.WriteString(part)
	}
	ciphertext, err := base64.StdEncoding.DecodeString(text.String())
	keyARN, volumeID := tags[s.tagKey(tagWrappingKey)], tags[s.tagKey(tagKeyVolume)]
	if err != nil || len(ciphertext) == 0 || keyARN == "" || volumeID == "" {
		return taggedKey{}, false, fmt.Errorf("its tags %s… hold no readable wrapped LUKS key (edited by hand?)", s.tagKey(tagWrappedKey))
	}
	return taggedKey{wrapped: datakeys.Wrapped{KeyARN: keyARN, Ciphertext: ciphertext},
		binding: datakeys.Binding{VolumeID: volumeID, Namespace: tags[s.tagKey(tagKeyNamespace)]}}, true, nil
}

// mergeMaps adds extra's entries to a copy of base (a volume context, tags).
func mergeMaps(base, extra map[string]string) map[string]string {
	if len(extra) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, extra)
	return out
}
