package csiproxy

// NewLibraryUnchecked is NewLibrary without its start check, for tests of a
// host that fails it (Windows' own under Wine).
func NewLibraryUnchecked(apis HostAPIs) (Host, error) { return newLibraryHost(apis) }
