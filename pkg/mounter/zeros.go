package mounter

// allZero reports whether b holds only zeros: the blank test of a device
// (Linux) or a disk (Windows, where the plugin can read it) that no probe
// recognises anything on.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
