//go:build !windows

package registration

// DefaultDir is the kubelet's plugin registration directory on a default
// installation.
const DefaultDir = "/var/lib/kubelet/plugins_registry"
