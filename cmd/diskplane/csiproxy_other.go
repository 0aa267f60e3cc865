//go:build !windows

package main

import (
	"context"

	"github.com/diskplane/diskplane/pkg/csiproxy"
)

// connectCSIProxy returns nothing: only a Windows node uses csi-proxy.
func connectCSIProxy(context.Context, *nodeFlags) (csiproxy.Host, error) { return nil, nil }

// closeHost has nothing to close where there is no csi-proxy.
func closeHost(csiproxy.Host) error { return nil }
