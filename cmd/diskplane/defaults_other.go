//go:build !windows

package main

// defaultEndpoint is where the plugin serves CSI unless --endpoint says
// otherwise: the socket directory the DaemonSet and Deployment mount.
const defaultEndpoint = "unix:///csi/csi.sock"
