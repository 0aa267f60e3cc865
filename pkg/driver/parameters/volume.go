package parameters

import (
	"strings"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

// Volume is what a CreateVolume request's StorageClass parameters and
// mutable (VolumeAttributesClass) parameters ask for.
type Volume struct {
	// Type is the volume type; DefaultVolumeType when none was given.
	Type cloud.VolumeType
	// IOPS is the provisioned IOPS; zero means the type's default.
	IOPS int32
	// IOPSPerGB provisions IOPS in proportion to the size; zero when not given.
	IOPSPerGB int32
	// AllowAutoIOPSPerGBIncrease lets the cloud raise IOPS from IOPSPerGB to the type's minimum.
	AllowAutoIOPSPerGBIncrease bool
	// Throughput is the provisioned throughput in MiB/s; zero means the type's default.
	Throughput int32
	// Encrypted asks for encryption; KMSKeyID names the key (and implies Encrypted).
	Encrypted bool
	KMSKeyID  string
	// NodeEncryption is the encryption the node applies itself
	// (volumecontext.NodeEncryptionLUKS2), or "".
	NodeEncryption string
	// NodeEncryptionKey says where the node's encryption key comes from
	// (a zero value: the node-stage secret).
	NodeEncryptionKey NodeEncryptionKey
	// FSType is the filesystem the node will create: the capability's
	// fs_type, else csi.storage.k8s.io/fstype, else the default.
	FSType string
	// FormatOptions are the mkfs options (blockSize, inodeSize, …), checked against FSType.
	FormatOptions volumecontext.FormatOptions
	// Context is the volume context for the node: the format options and,
	// when the request named one, the filesystem type.
	Context map[string]string
	// Metadata is the claim and volume the provisioner created the volume for.
	Metadata VolumeTemplateData
	// Tags are every tag to set on the new volume: --extra-tags, the
	// StorageClass's and the VolumeAttributesClass's tagSpecification_<N>,
	// the cluster tags and the created-for tags, less the keys the
	// VolumeAttributesClass's tagDeletion_<N> remove. The cloud adds CSIVolumeName.
	Tags map[string]string
}

// mutableKeysAtCreate lists, for messages, what a VolumeAttributesClass may
// set on CreateVolume: everything it may set on an existing volume.
const mutableKeysAtCreate = mutableKeys

// Volume parses a CreateVolume request's parameters and mutable parameters.
// Mutable parameters take precedence (the CSI spec says so): a mutable iops
// replaces the StorageClass's iops or iopsPerGB, and a tagDeletion_<N>
// keeps a tag of the StorageClass or --extra-tags off the new volume, so a
// volume created with a VolumeAttributesClass ends up as one modified to it
// afterwards would. capabilityFSType is the
// fs_type of the request's mount capability (empty for block volumes or
// when the capability names none).
func (p *Parser) Volume(parameters, mutable map[string]string, capabilityFSType string) (*Volume, error) {
	v := &Volume{Type: DefaultVolumeType}
	var iopsKey, perGBKey, throughputKey string
	var encryptedKey, fsTypeKey, paramFSType string
	explicitlyUnencrypted := false
	specs := map[string]string{}
	formatOptions := map[string]string{}

	err := newParams().each(parameters, func(key, lower, value string) error {
		var err error
		switch lower {
		case strings.ToLower(KeyType):
			v.Type, err = parseVolumeType(key, value)
		case strings.ToLower(KeyIOPS):
			iopsKey = key
			v.IOPS, err = parsePositive(key, value)
		case strings.ToLower(KeyIOPSPerGB):
			perGBKey = key
			v.IOPSPerGB, err = parsePositive(key, value)
		case strings.ToLower(KeyAllowAutoIOPSPerGBIncrease):
			v.AllowAutoIOPSPerGBIncrease, err = parseBool(key, value)
		case strings.ToLower(KeyThroughput):
			throughputKey = key
			v.Throughput, err = parsePositive(key, value)
		case strings.ToLower(KeyEncrypted):
			encryptedKey = key
			v.Encrypted, err = parseBool(key, value)
			explicitlyUnencrypted = err == nil && !v.Encrypted
		case strings.ToLower(KeyKMSKeyID):
			v.KMSKeyID = strings.TrimSpace(value)
		case strings.ToLower(KeyNodeEncryption):
			if v.NodeEncryption, err = volumecontext.NodeEncryption(map[string]string{key: value}); err != nil {
				err = invalid(key, "is %q: the node encrypts with %s only (see docs/encryption.md)", value, volumecontext.NodeEncryptionLUKS2)
			}
		case strings.ToLower(KeyNodeEncryptionKeySource), strings.ToLower(KeyNodeEncryptionKMSKeyID), strings.ToLower(KeyNodeEncryptionRoleARN),
			strings.ToLower(KeyNodeEncryptionOnRevocation):
			err = v.NodeEncryptionKey.set(key, lower, value)
		case strings.ToLower(KeyFSType):
			fsTypeKey, paramFSType = key, value
		case strings.ToLower(KeyPVCName):
			v.Metadata.PVCName, err = value, checkTagValue(key, value)
		case strings.ToLower(KeyPVCNamespace):
			v.Metadata.PVCNamespace, err = value, checkTagValue(key, value)
		case strings.ToLower(KeyPVName):
			v.Metadata.PVName, err = value, checkTagValue(key, value)
		default:
			if hasPrefixFold(key, KeyTagSpecificationPrefix) {
				specs[key] = value
				return nil
			}
			if canonical, ok := formatOptionKey(lower); ok {
				formatOptions[canonical] = value
				return nil
			}
			return invalid(key, "is not a StorageClass parameter Diskplane knows (see docs/parameters.md)")
		}
		return err
	})
	if err != nil {
		return nil, err
	}

	mutableSpecs := map[string]string{}
	deletions := map[string]string{}
	err = newParams().each(mutable, func(key, lower, value string) error {
		var err error
		switch lower {
		case strings.ToLower(KeyType):
			v.Type, err = parseVolumeType(key, value)
		case strings.ToLower(KeyIOPS):
			iopsKey, perGBKey, v.IOPSPerGB = key, "", 0
			v.IOPS, err = parsePositive(key, value)
		case strings.ToLower(KeyThroughput):
			throughputKey = key
			v.Throughput, err = parsePositive(key, value)
		default:
			switch {
			case hasPrefixFold(key, KeyTagSpecificationPrefix):
				mutableSpecs[key] = value
			case hasPrefixFold(key, KeyTagDeletionPrefix):
				deletions[key] = value
			default:
				return invalid(key, "is not a mutable parameter a new volume takes (only %s are)", mutableKeysAtCreate)
			}
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}

	if err := checkPerformance(v.Type, iopsKey, v.IOPS, perGBKey, v.IOPSPerGB, throughputKey, v.Throughput); err != nil {
		return nil, err
	}
	if v.KMSKeyID != "" {
		if explicitlyUnencrypted {
			return nil, invalid(encryptedKey, "is false but kmsKeyId is set: a KMS key only makes sense for an encrypted volume")
		}
		v.Encrypted = true
	}
	if err := v.NodeEncryptionKey.check(v.NodeEncryption); err != nil {
		return nil, err
	}
	if v.FSType, v.FormatOptions, err = resolveFormat(fsTypeKey, paramFSType, capabilityFSType, formatOptions); err != nil {
		return nil, err
	}
	v.Context = v.FormatOptions.VolumeContext()
	if v.NodeEncryption != "" {
		v.Context[volumecontext.NodeEncryptionKey] = v.NodeEncryption
	}
	if capabilityFSType != "" || paramFSType != "" {
		v.Context[volumecontext.FSTypeKey] = v.FSType
	}

	classTags, err := p.evaluateSpecs(specs, v.Metadata)
	if err != nil {
		return nil, err
	}
	attributeTags, err := p.evaluateSpecs(mutableSpecs, v.Metadata)
	if err != nil {
		return nil, err
	}
	deleteTags, err := p.tagDeletions(deletions, attributeTags)
	if err != nil {
		return nil, err
	}
	v.Tags = mergeTags(p.extraTags, classTags, attributeTags, p.ownerTags, createdForTags(v.Metadata))
	for _, key := range deleteTags {
		delete(v.Tags, key)
	}
	return v, nil
}

// evaluateSpecs renders tagSpecification_<N> parameters into tags.
func (p *Parser) evaluateSpecs(specs map[string]string, data any) (map[string]string, error) {
	set := newTagSet()
	for _, param := range sortedKeys(specs) {
		key, value, err := p.tagSpecification(param, specs[param], data)
		if err != nil {
			return nil, err
		}
		if err := set.add(param, key, value); err != nil {
			return nil, err
		}
	}
	return set.tags, nil
}

// createdForTags records the claim and volume a volume was made for, when
// the provisioner says.
func createdForTags(m VolumeTemplateData) map[string]string {
	tags := map[string]string{}
	for key, value := range map[string]string{
		TagCreatedForPVCName:      m.PVCName,
		TagCreatedForPVCNamespace: m.PVCNamespace,
		TagCreatedForPVName:       m.PVName,
	} {
		if value != "" {
			tags[key] = value
		}
	}
	return tags
}
