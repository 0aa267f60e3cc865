package driver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Endpoint is where the CSI gRPC server listens: a unix socket (what the
// kubelet and the sidecars use) or a TCP address (handy for csi-sanity or a
// debugger).
type Endpoint struct {
	// Network is "unix" or "tcp".
	Network string
	// Address is the socket path for unix, host:port for tcp.
	Address string
}

// ParseEndpoint reads the --endpoint flag: unix:///abs/path, unix:/abs/path or
// tcp://host:port. Anything else is rejected with a message that shows the
// accepted forms, because a typo here otherwise surfaces as a kubelet that
// silently never finds the plugin.
func ParseEndpoint(s string) (Endpoint, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint %q: %w", s, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "unix":
		path := u.Path
		if len(u.Host) == 2 && u.Host[1] == ':' {
			// Windows: unix://C:/csi/csi.sock puts the drive letter in Host.
			path, u.Host = u.Host+u.Path, ""
		}
		if u.Host != "" {
			// unix://relative/path parses the first element as a host; refuse it
			// rather than guess which directory was meant.
			return Endpoint{}, fmt.Errorf("endpoint %q: unix socket path must be absolute, e.g. unix:///csi/csi.sock", s)
		}
		if path == "" || !filepath.IsAbs(path) {
			return Endpoint{}, fmt.Errorf("endpoint %q: unix socket path must be absolute, e.g. unix:///csi/csi.sock", s)
		}
		return Endpoint{Network: "unix", Address: filepath.Clean(path)}, nil
	case "tcp":
		if u.Host == "" || u.Path != "" && u.Path != "/" {
			return Endpoint{}, fmt.Errorf("endpoint %q: want tcp://host:port", s)
		}
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return Endpoint{}, fmt.Errorf("endpoint %q: want tcp://host:port: %w", s, err)
		}
		return Endpoint{Network: "tcp", Address: u.Host}, nil
	default:
		return Endpoint{}, fmt.Errorf("endpoint %q: scheme must be unix:// or tcp://", s)
	}
}

// String renders the endpoint back in flag form.
func (e Endpoint) String() string {
	if e.Network == "unix" {
		return "unix://" + e.Address
	}
	return "tcp://" + e.Address
}

// ErrEndpointInUse reports a unix socket that another live process serves;
// starting a second plugin on it would steal traffic from the first.
var ErrEndpointInUse = errors.New("endpoint is served by another live process")

// Listen opens the endpoint. For a unix socket it creates the parent
// directory, removes a stale socket file left by a crashed predecessor, and
// refuses a socket that still answers or a path that is not a socket at all
// (never delete a file we did not make).
func (e Endpoint) Listen() (net.Listener, error) {
	if e.Network == "unix" {
		if err := prepareUnixSocket(e.Address); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen(e.Network, e.Address)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", e, err)
	}
	return l, nil
}

func prepareUnixSocket(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("create socket directory: %w", err)
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket path %s exists and is not a socket; refusing to remove it", path)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = conn.Close()
		return fmt.Errorf("%w: %s", ErrEndpointInUse, path)
	}
	if !connectionRefused(err) && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("probe socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}
