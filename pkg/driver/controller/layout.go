package controller

import (
	"strings"

	"github.com/diskplane/diskplane/pkg/driver/parameters"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

// tagLayout is the tag (under the driver's prefix) that records what a
// volume was made for, and that its snapshots carry: "ext4", "xfs", "ntfs"
// or "block", after "luks2:" when the node encrypts it. A restore or clone
// whose source was made for another layout than the new volume's class is
// refused (checkSourceLayout).
const tagLayout = "layout"

// layoutBlock is the layout of a raw block volume.
const layoutBlock = "block"

// layoutOf is the layout a CreateVolume request makes: its filesystem, or
// block, behind the node's encryption. A filesystem volume whose request
// names no filesystem type has none ("": the node takes its own OS's
// default).
func layoutOf(p *parameters.Volume, caps capabilitySet) string {
	layout := ""
	switch {
	case caps.block:
		layout = layoutBlock
	case p.Context[volumecontext.FSTypeKey] != "":
		layout = p.FSType
	default:
		return ""
	}
	if p.NodeEncryption != "" {
		layout = p.NodeEncryption + ":" + layout
	}
	return layout
}

// checkSourceLayout refuses a restore or clone whose source was made for
// another layout than the new volume's. A node given such a volume finds
// what it does not expect: a Linux node refuses to stage it, but a Windows
// node may not see a Linux filesystem written over the whole disk, and
// would partition and format it NTFS. Unknown layouts (a source made
// before the tag, or a class that names no filesystem) pass, as do a new
// raw block volume (raw access formats nothing) and a filesystem on
// Linux from a raw block volume (the node looks at what the data is).
func checkSourceLayout(src contentSource, layout string) error {
	switch {
	case src.layout == "" || layout == "" || src.layout == layout:
		return nil
	case strings.HasSuffix(layout, layoutBlock):
		return nil
	case strings.HasSuffix(src.layout, layoutBlock) && !strings.HasSuffix(layout, volumecontext.FSTypeNTFS):
		return nil
	}
	return invalidArgument("source %s was made as %q, and this class makes %q: a node would find on it what it does not expect "+
		"(a Windows node may format a Linux filesystem it cannot see); restore it with a class of the same filesystem "+
		"and %s, or copy the data", src.what, src.layout, layout, parameters.KeyNodeEncryption)
}
