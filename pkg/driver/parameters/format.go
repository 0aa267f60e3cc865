package parameters

import (
	"strings"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

// formatOptionKeys are the StorageClass keys that carry mkfs options to the
// node; the node service reads them back from the volume context.
var formatOptionKeys = []string{
	volumecontext.BlockSizeKey, volumecontext.InodeSizeKey, volumecontext.BytesPerInodeKey,
	volumecontext.NumberOfInodesKey, volumecontext.Ext4BigAllocKey, volumecontext.Ext4ClusterSizeKey,
}

// formatOptionKey returns the canonical spelling of a lower-cased format option key.
func formatOptionKey(lower string) (string, bool) {
	for _, k := range formatOptionKeys {
		if strings.ToLower(k) == lower {
			return k, true
		}
	}
	return "", false
}

// resolveFormat picks the filesystem a new volume will get (the capability's
// fs_type, else csi.storage.k8s.io/fstype, else the default) and checks the
// format options against it with the same code the node runs before mkfs, so
// a bad option fails at provisioning rather than when a pod starts.
func resolveFormat(fsTypeKey, paramFSType, capabilityFSType string, options map[string]string) (string, volumecontext.FormatOptions, error) {
	fsType, fsKey := capabilityFSType, "fs_type of the volume capability"
	if fsType == "" {
		fsType, fsKey = paramFSType, fsTypeKey
	}
	normalized, err := volumecontext.NormalizeFSType(fsType)
	if err != nil {
		return "", volumecontext.FormatOptions{}, invalid(fsKey, "%s", err)
	}
	opts, err := volumecontext.ParseFormatOptions(options, normalized)
	if err != nil {
		return "", volumecontext.FormatOptions{}, &Error{Reason: err.Error()}
	}
	return normalized, opts, nil
}
