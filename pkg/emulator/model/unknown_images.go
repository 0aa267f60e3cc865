package model

import (
	"slices"

	"k8s.io/klog/v2"
)

// removeUnknownImages removes the disk store's images of volumes and
// snapshots the state does not name. The model makes an image before it
// saves the state that names it, so a crash in between leaves an image no
// one was told about; the client's retry makes a new ID, and nothing would
// ever use or remove the old image. New calls it only for a state loaded
// from the data directory's state file (the authority over what the
// directory holds), after the host's devices are reconciled (so no device
// of a volume the state does not attach holds an image any more) and after
// the state is saved (so everything it names is durable). An in-memory
// cloud (no DataDir) has no authority over any directory and does nothing.
// Nothing here fails the start: an image that stays costs disk space, not
// correctness, and the next start tries again.
func (c *Cloud) removeUnknownImages() {
	if c.cfg.DataDir == "" {
		return
	}
	removed, err := c.cfg.Store.RemoveUnknownImages(c.cfg.DataDir, c.imageIDs())
	if len(removed) > 0 {
		klog.V(2).InfoS("Removed images a crash left that no volume or snapshot in the saved state names",
			"count", len(removed), "ids", removed)
	}
	if err != nil {
		klog.ErrorS(err, "Could not remove every image the saved state does not name; the next start tries again",
			"dataDir", c.cfg.DataDir)
	}
}

// keepImagesFound records in a new state (no state file: a new data
// directory, or one whose state file someone removed) the images the data
// directory already holds. They may be someone's data: they are reported
// and kept, on this start and on every later one, which would otherwise
// take them for a crash's leftovers of the state saved now.
func (c *Cloud) keepImagesFound() {
	if c.cfg.DataDir == "" {
		return
	}
	unknown, err := c.cfg.Store.UnknownImages(c.imageIDs())
	if err != nil {
		klog.ErrorS(err, "Could not look for images the state does not name", "dataDir", c.cfg.DataDir)
		return
	}
	if len(unknown) == 0 {
		return
	}
	c.st.KeptImages = unknown
	klog.InfoS("The data directory holds images of volumes or snapshots that the new state does not name; "+
		"without a saved state they may be someone's data, so they are kept: restore the state file, or remove them by hand",
		"count", len(unknown), "dataDir", c.cfg.DataDir)
}

// imageIDs lists, sorted, the IDs whose images the model keeps: the
// volumes and snapshots the state names, whatever their state, and the
// images kept from before the state began.
func (c *Cloud) imageIDs() []string {
	ids := make([]string, 0, len(c.st.Volumes)+len(c.st.Snapshots)+len(c.st.KeptImages))
	for id := range c.st.Volumes {
		ids = append(ids, id)
	}
	for id := range c.st.Snapshots {
		ids = append(ids, id)
	}
	ids = append(ids, c.st.KeptImages...)
	slices.Sort(ids)
	return slices.Compact(ids)
}
