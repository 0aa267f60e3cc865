package csiproxyapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/Microsoft/go-winio"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/csiproxy"
	"github.com/diskplane/diskplane/pkg/emulator/winhost"
)

// Options shape Serve.
type Options struct {
	// PipePrefix is the prefix of the pipe names; empty means csi-proxy's
	// own (csi-proxy), which is what a node plugin dials.
	PipePrefix string
	// WorkingDirs are the directories the filesystem API may touch.
	WorkingDirs []string
	// Release is the csi-proxy release whose API group versions are
	// served; the zero value means DefaultRelease.
	Release Release
}

// Serve serves the API groups of opts.Release over host on their named
// pipes until ctx ends. ready, if not nil, is called once every pipe
// accepts clients.
func Serve(ctx context.Context, host *winhost.Host, opts Options, ready func()) error {
	release := opts.Release
	if release.Version == "" {
		release = DefaultRelease
	}
	servers := Groups(host, release, opts.WorkingDirs)
	listeners := map[API]net.Listener{}
	for api := range servers {
		path := csiproxy.PipePath(opts.PipePrefix, api.Group, api.Version)
		l, err := listen(path)
		if err != nil {
			for _, o := range listeners {
				o.Close()
			}
			return fmt.Errorf("listen on %s: %w", path, err)
		}
		listeners[api] = l
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(servers))
	for api, s := range servers {
		l := listeners[api]
		wg.Go(func() {
			klog.V(2).InfoS("Serving csi-proxy API group", "group", api.Group, "version", api.Version, "pipe", l.Addr())
			if err := s.Serve(l); err != nil {
				errs <- fmt.Errorf("serve %s %s: %w", api.Group, api.Version, err)
			}
		})
	}
	if ready != nil {
		ready()
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		klog.ErrorS(err, "A csi-proxy API group stopped")
	}
	for _, s := range servers {
		s.Stop()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// listen listens on a pipe and then connects to it once and hangs up. Under
// Wine 8.0 the first client of a pipe from go-winio's ListenPipe lands on
// the instance ListenPipe keeps in reserve, which is never served; this
// connection takes that place, so every real client is served. On Windows
// the connection is accepted and closed at once.
func listen(path string) (net.Listener, error) {
	l, err := winio.ListenPipe(path, nil)
	if err != nil {
		return nil, err
	}
	timeout := 2 * time.Second
	if c, err := winio.DialPipe(path, &timeout); err == nil {
		c.Close()
	}
	return l, nil
}
