// Package parameters parses the parameters users give Diskplane in a
// StorageClass, a VolumeSnapshotClass and a VolumeAttributesClass, and the
// tags the driver puts on what it creates.
//
// Keys are matched case-insensitively and named as the upstream AWS EBS CSI
// driver names them, so a StorageClass written for it works here unchanged.
// An unknown key, a bad value or a tag the driver reserves is an *Error that
// names the key; the controller answers it with InvalidArgument before it
// touches the cloud.
package parameters

import (
	"errors"
	"strings"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

// Parameter keys. Users may write them in any letter case.
const (
	// KeyType is the EBS volume type: gp3 (default), gp2, io1, io2, st1, sc1 or standard.
	KeyType = "type"
	// KeyIOPS is the provisioned IOPS of a gp3, io1 or io2 volume.
	KeyIOPS = "iops"
	// KeyIOPSPerGB provisions IOPS in proportion to the size (gp3, io1, io2).
	KeyIOPSPerGB = "iopsPerGB"
	// KeyAllowAutoIOPSPerGBIncrease raises IOPS computed from iopsPerGB to the type's minimum instead of failing.
	KeyAllowAutoIOPSPerGBIncrease = "allowAutoIOPSPerGBIncrease"
	// KeyThroughput is the provisioned throughput of a gp3 volume in MiB/s.
	KeyThroughput = "throughput"
	// KeyEncrypted asks for an encrypted volume ("true" or "false").
	KeyEncrypted = "encrypted"
	// KeyKMSKeyID is the KMS key that encrypts the volume; it implies encrypted.
	KeyKMSKeyID = "kmsKeyId"
	// KeyNodeEncryption asks the node to encrypt the volume with LUKS2 and
	// the passphrase of the node-stage secret (volumecontext.NodeEncryptionKey).
	KeyNodeEncryption = volumecontext.NodeEncryptionKey
	// KeyNodeEncryptionKeySource is where that encryption's key comes from:
	// secret (the node-stage secret's passphrase, the default) or kms.
	KeyNodeEncryptionKeySource = volumecontext.NodeEncryptionKeySourceKey
	// KeyNodeEncryptionKMSKeyID is the KMS key that wraps the volume key
	// (nodeEncryptionKeySource: kms): an ID, ARN, alias or alias ARN.
	KeyNodeEncryptionKMSKeyID = volumecontext.NodeEncryptionKMSKeyIDKey
	// KeyNodeEncryptionRoleARN is the IAM role whose pods may unwrap it
	// (nodeEncryptionKeySource: kms).
	KeyNodeEncryptionRoleARN = volumecontext.NodeEncryptionRoleARNKey
	// KeyNodeEncryptionOnRevocation says whether a revoked pod's volume is
	// fenced read-only on its node (nodeEncryptionKeySource: kms).
	KeyNodeEncryptionOnRevocation = volumecontext.NodeEncryptionOnRevocationKey
	// KeyFSType is the filesystem the provisioner asks for.
	KeyFSType = "csi.storage.k8s.io/fstype"
	// KeyPVCName, KeyPVCNamespace and KeyPVName are added by the provisioner's
	// --extra-create-metadata (and the resizer's --extra-modify-metadata).
	KeyPVCName      = "csi.storage.k8s.io/pvc/name"
	KeyPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
	KeyPVName       = "csi.storage.k8s.io/pv/name"
	// KeyVolumeSnapshotName, KeyVolumeSnapshotNamespace and
	// KeyVolumeSnapshotContentName are added by the snapshotter's --extra-create-metadata.
	KeyVolumeSnapshotName        = "csi.storage.k8s.io/volumesnapshot/name"
	KeyVolumeSnapshotNamespace   = "csi.storage.k8s.io/volumesnapshot/namespace"
	KeyVolumeSnapshotContentName = "csi.storage.k8s.io/volumesnapshotcontent/name"
	// KeyTagSpecificationPrefix starts every tag parameter: tagSpecification_<N> = "key=value template".
	KeyTagSpecificationPrefix = "tagSpecification"
	// KeyTagDeletionPrefix starts every VolumeAttributesClass tag removal: tagDeletion_<N> = "key".
	KeyTagDeletionPrefix = "tagDeletion"
)

// Config is what the parser needs to know about the running driver.
type Config struct {
	// DriverName is the CSI driver name; tag keys under "<DriverName>/" are reserved.
	DriverName string
	// ClusterID is --k8s-tag-cluster-id: when set, every volume and snapshot
	// gets the tag kubernetes.io/cluster/<ClusterID>=owned.
	ClusterID string
	// ExtraTags is --extra-tags: tags for every volume and snapshot.
	ExtraTags map[string]string
}

// Parser turns request parameters into what the controller asks of the
// cloud. It is safe for concurrent use.
type Parser struct {
	driverName string
	ownerTags  map[string]string
	extraTags  map[string]string
}

// NewParser checks the driver-wide tag settings (an extra tag may not use a
// reserved key) and returns a parser for them.
func NewParser(cfg Config) (*Parser, error) {
	if cfg.DriverName == "" {
		return nil, errors.New("parameters: driver name is required")
	}
	p := &Parser{driverName: cfg.DriverName, extraTags: map[string]string{}}
	for _, k := range sortedKeys(cfg.ExtraTags) {
		if err := p.checkUserTagKey("--extra-tags", k); err != nil {
			return nil, err
		}
		if err := checkTagValue("--extra-tags", cfg.ExtraTags[k]); err != nil {
			return nil, err
		}
		p.extraTags[k] = cfg.ExtraTags[k]
	}
	p.ownerTags = map[string]string{ClusterTagKey(cfg.DriverName): "true"}
	if cfg.ClusterID != "" {
		key := ClusterIDTagKey(cfg.ClusterID)
		if err := checkTagKeySyntax("--k8s-tag-cluster-id", key); err != nil {
			return nil, err
		}
		p.ownerTags[key] = "owned"
	}
	return p, nil
}

// params walks a parameter map in key order with each key's lower-case
// form, and refuses two spellings of the same key ("type" and "Type").
type params struct {
	seen map[string]string
}

func newParams() *params { return &params{seen: map[string]string{}} }

// each calls fn for every entry of m, sorted, with the key lower-cased.
func (p *params) each(m map[string]string, fn func(key, lower, value string) error) error {
	for _, key := range sortedKeys(m) {
		lower := strings.ToLower(key)
		if prev, dup := p.seen[lower]; dup {
			return invalid(key, "is given twice (also as %q)", prev)
		}
		p.seen[lower] = key
		if err := fn(key, lower, m[key]); err != nil {
			return err
		}
	}
	return nil
}

// hasPrefixFold reports whether key starts with prefix, ignoring case.
func hasPrefixFold(key, prefix string) bool {
	return len(key) >= len(prefix) && strings.EqualFold(key[:len(prefix)], prefix)
}
