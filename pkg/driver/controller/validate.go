package controller

import (
	"fmt"
	"unicode/utf8"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

// maxNameLength bounds a CSI volume or snapshot name: the cloud stores it in
// a tag, whose value EC2 limits to 256 characters.
const maxNameLength = 256

// capabilitySet summarises the volume capabilities of one request.
type capabilitySet struct {
	// multiNode is true when a capability asks for MULTI_NODE_* access,
	// which needs an io2 volume with multi-attach enabled.
	multiNode bool
	// block and mount say which access types were asked for.
	block, mount bool
	// fsType is the fs_type of the mount capabilities (empty when none names one).
	fsType string
}

// checkCapabilities validates a request's volume capabilities against what
// EBS can do: single-node modes for any volume; multi-node writer and
// reader-only modes only for raw block volumes (EBS multi-attach does not
// make a filesystem safe to share); nothing else.
func checkCapabilities(caps []*csi.VolumeCapability) (capabilitySet, error) {
	var set capabilitySet
	if len(caps) == 0 {
		return set, invalidArgument("volume capabilities are missing")
	}
	for i, c := range caps {
		if err := checkCapability(c, &set); err != nil {
			return capabilitySet{}, invalidArgument("volume capability %d: %v", i+1, err)
		}
	}
	return set, nil
}

func checkCapability(c *csi.VolumeCapability, set *capabilitySet) error {
	if c == nil {
		return fmt.Errorf("is empty")
	}
	isBlock := c.GetBlock() != nil
	switch {
	case isBlock:
		set.block = true
	case c.GetMount() != nil:
		set.mount = true
		fs := c.GetMount().GetFsType()
		if fs == "" {
			break
		}
		normalized, err := volumecontext.NormalizeFSType(fs)
		if err != nil {
			return err
		}
		if set.fsType != "" && set.fsType != normalized {
			return fmt.Errorf("filesystem %s conflicts with %s in another capability", normalized, set.fsType)
		}
		set.fsType = normalized
	default:
		return fmt.Errorf("access type is missing: want block or mount")
	}
	if c.GetAccessMode() == nil {
		return fmt.Errorf("access mode is missing")
	}
	switch mode := c.GetAccessMode().GetMode(); mode {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:
		return nil
	case csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		if !isBlock {
			return fmt.Errorf("access mode %s needs a raw block volume: an EBS volume attached to several nodes cannot hold a shared filesystem", mode)
		}
		set.multiNode = true
		return nil
	default:
		return fmt.Errorf("access mode %s is not supported: EBS volumes are single-node, or multi-node for io2 block volumes", mode)
	}
}

// checkVolumeSupports reports why an existing volume cannot serve the
// capabilities, or "" when it can.
func checkVolumeSupports(v *cloud.Volume, set capabilitySet) string {
	if set.multiNode && !v.MultiAttach {
		return fmt.Sprintf("volume %s does not have multi-attach enabled, so it cannot be used by several nodes", v.ID)
	}
	return ""
}

// checkName validates a CSI volume or snapshot name.
func checkName(what, name string) error {
	switch {
	case name == "":
		return invalidArgument("%s name is missing", what)
	case !utf8.ValidString(name):
		return invalidArgument("%s name is not valid UTF-8", what)
	case utf8.RuneCountInString(name) > maxNameLength:
		return invalidArgument("%s name is longer than %d characters", what, maxNameLength)
	}
	return nil
}

// requireID rejects a request whose ID field is empty.
func requireID(what, id string) error {
	if id == "" {
		return invalidArgument("%s is missing", what)
	}
	return nil
}
