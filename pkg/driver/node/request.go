package node

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

// The node's RPCs parse their requests once, at the edge, into the values
// below; every later step decides from them and never looks up the
// request's maps (volume context, secrets, publish context) again. Bad
// input is refused there, before any work, with InvalidArgument naming
// what to fix.

// keySource is where the key of a volume encrypted on the node comes from.
type keySource int

const (
	// notEncrypted: the node does not encrypt the volume.
	notEncrypted keySource = iota
	// fromSecret: LUKS2 opened with the passphrase of the node-stage secret.
	fromSecret
	// fromKMSKey: LUKS2 opened with a key KMS wraps, which each publishing
	// pod unlocks with its own service-account token.
	fromKMSKey
)

// volumeSpec is what a volume's context and the request's capability ask
// of the node.
type volumeSpec struct {
	// capability is the request's, checked against the node's platform.
	capability *csi.VolumeCapability
	// block: raw block access; else a filesystem at the staging path.
	block bool
	// keys says whether and how the node encrypts the volume.
	keys keySource
	// kms is the wrapped key of a fromKMSKey volume.
	kms volumecontext.KMSKey
	// fsType and format: the filesystem to make and mount (mount access).
	fsType string
	format volumecontext.FormatOptions
}

// encrypted reports whether the node encrypts the volume (LUKS2).
func (v volumeSpec) encrypted() bool { return v.keys != notEncrypted }

// parseVolume checks a capability and parses a volume context: the
// encryption (an unknown one, or one this node's operating system cannot
// do, is refused: such a volume must never be formatted in the clear), a
// KMS-wrapped key's entries (raw block access to one is refused: the
// kubelet passes block volumes no token, so no pod could unlock it), and
// for mount access the filesystem and its format options.
func (s *Service) parseVolume(volumeID string, c *csi.VolumeCapability, vc map[string]string) (volumeSpec, error) {
	v := volumeSpec{capability: c}
	var err error
	if v.block, err = s.checkCapability(c); err != nil {
		return v, err
	}
	encrypted, err := s.nodeEncryption(vc)
	if err != nil {
		return v, err
	}
	if encrypted {
		source, err := volumecontext.KeySource(vc)
		if err != nil {
			return v, status.Errorf(codes.InvalidArgument, "volume context: %v", err)
		}
		v.keys = fromSecret
		if source == volumecontext.KeySourceKMS {
			v.keys = fromKMSKey
			if v.block {
				return v, errNoBlockTokens(volumeID)
			}
			if v.kms, err = volumecontext.KMSKeyOf(vc); err != nil {
				return v, status.Errorf(codes.InvalidArgument, "volume %s: %v", volumeID, err)
			}
		}
	}
	if !v.block {
		if v.fsType, v.format, err = s.filesystemOf(c, vc); err != nil {
			return v, err
		}
	}
	return v, nil
}

// stageRequest is a NodeStageVolume request, parsed.
type stageRequest struct {
	volumeID, staging string
	volume            volumeSpec
	// devicePath is where the attachment's device name points (the
	// publish context's), the first place to look for the device.
	devicePath string
	// passphrase opens a fromSecret volume; the caller wipes it.
	passphrase []byte
}

func (s *Service) parseStage(req *csi.NodeStageVolumeRequest) (stageRequest, error) {
	r := stageRequest{volumeID: req.GetVolumeId(), staging: req.GetStagingTargetPath(),
		devicePath: req.GetPublishContext()[volumecontext.DevicePathKey]}
	if err := checkVolumeID(r.volumeID); err != nil {
		return r, err
	}
	if err := checkPath("staging target path", r.staging); err != nil {
		return r, err
	}
	var err error
	if r.volume, err = s.parseVolume(r.volumeID, req.GetVolumeCapability(), req.GetVolumeContext()); err != nil {
		return r, err
	}
	if r.volume.keys == fromSecret {
		if r.passphrase, err = stagePassphrase(r.volumeID, req.GetSecrets()); err != nil {
			return r, err
		}
	}
	return r, nil
}

// publishRequest is a NodePublishVolume request, parsed. The pod's
// service-account tokens stay in the request's maps until a KMS-keyed
// volume's publish reads them (podToken): they are credentials, read only
// where they are used.
type publishRequest struct {
	volumeID, target, staging string
	volume                    volumeSpec
	devicePath                string
	// readOnly: the request or a reader-only access mode asks for a
	// read-only publication.
	readOnly bool
	// secrets and volumeContext are where the kubelet may put the pod's
	// tokens.
	secrets, volumeContext map[string]string
}

func (s *Service) parsePublish(req *csi.NodePublishVolumeRequest) (publishRequest, error) {
	r := publishRequest{volumeID: req.GetVolumeId(), target: req.GetTargetPath(), staging: req.GetStagingTargetPath(),
		devicePath: req.GetPublishContext()[volumecontext.DevicePathKey], secrets: req.GetSecrets(), volumeContext: req.GetVolumeContext()}
	if err := checkVolumeID(r.volumeID); err != nil {
		return r, err
	}
	if err := checkPath("target path", r.target); err != nil {
		return r, err
	}
	var err error
	if r.volume, err = s.parseVolume(r.volumeID, req.GetVolumeCapability(), req.GetVolumeContext()); err != nil {
		return r, err
	}
	if !r.volume.block {
		if err := checkPath("staging target path", r.staging); err != nil {
			return r, err
		}
	}
	r.readOnly = req.GetReadonly() || readerOnly(r.volume.capability)
	if err := s.checkReadOnlyPublish(r.volumeID, r.volume, req.GetReadonly()); err != nil {
		return r, err
	}
	return r, nil
}

// expandRequest is a NodeExpandVolume request, parsed.
type expandRequest struct {
	volumeID, volumePath string
	// block: the capability asks for raw block access; false also when
	// the request carries no capability (the path tells then).
	block bool
	// passphrase grows an encrypted volume's mapping (the node-expand
	// secret's; nil when there is none); the caller wipes it.
	passphrase []byte
	// requiredBytes is the least size the volume must now have.
	requiredBytes int64
}

func (s *Service) parseExpand(req *csi.NodeExpandVolumeRequest) (expandRequest, error) {
	r := expandRequest{volumeID: req.GetVolumeId(), volumePath: req.GetVolumePath(), requiredBytes: req.GetCapacityRange().GetRequiredBytes()}
	if err := checkVolumeID(r.volumeID); err != nil {
		return r, err
	}
	if err := checkVolumePath(r.volumeID, r.volumePath); err != nil {
		return r, err
	}
	if staging := req.GetStagingTargetPath(); staging != "" {
		if err := checkPath("staging target path", staging); err != nil {
			return r, err
		}
	}
	if c := req.GetVolumeCapability(); c != nil {
		var err error
		if r.block, err = s.checkCapability(c); err != nil {
			return r, err
		}
	}
	r.passphrase = passphrase(req.GetSecrets())
	return r, nil
}
