// Package metadata tells a node plugin which instance it runs on: its ID,
// type, region, zone and how many attachment slots are already taken. It
// needs no cloud credentials: the sources are the instance metadata service
// (IMDSv2) and, when that is unreachable, the Kubernetes Node object.
//
// IMDS is the authority and is tried first by default. It is also the source
// most often out of reach from a pod (a hop limit of 1 drops the IMDSv2 token
// reply, some CNIs block 169.254.169.254), so it gets short timeouts and few
// retries, and Get falls through to the Node object, whose providerID and
// well-known labels the cloud controller manager has set.
package metadata

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Instance is what a node learns about itself.
type Instance struct {
	// ID is the EC2 instance ID (i-…); it is the CSI node ID.
	ID string
	// Type is the instance type (e.g. m5.large); it decides the attachment limit.
	Type string
	// Region is the AWS region (e.g. us-east-1).
	Region string
	// Zone is the availability zone name (e.g. us-east-1a).
	Zone string
	// ZoneID is the availability zone ID (e.g. use1-az1); empty when the source does not know it.
	ZoneID string
	// NetworkInterfaces is the number of network interfaces attached; on
	// instance types whose attachment slots are shared, each one takes a slot.
	// It is at least 1: a source that cannot count them (the Node object)
	// reports the primary interface every instance has.
	NetworkInterfaces int
	// BlockDeviceMappings maps the launch-time mapping names (root, ebs1, …) to
	// device names; they take attachment slots the driver cannot use. It is
	// nil when the source cannot tell (the Node object).
	BlockDeviceMappings map[string]string
	// Source names the source that answered (SourceIMDS or SourceKubernetes),
	// so logs and callers can tell how much of the above is known.
	Source string
}

// The metadata sources Get can ask.
const (
	// SourceIMDS is the EC2 instance metadata service, IMDSv2 only.
	SourceIMDS = "imds"
	// SourceKubernetes is the node's Kubernetes Node object.
	SourceKubernetes = "kubernetes"
)

// DefaultSources is the order Get tries sources in when Options.Sources is
// empty: the instance's own metadata first, the Node object as the fallback.
var DefaultSources = []string{SourceIMDS, SourceKubernetes}

// NodeNameEnv is the environment variable that holds the Kubernetes node
// name when Options.NodeName is empty; the DaemonSet sets it from the
// downward API (spec.nodeName).
const NodeNameEnv = "CSI_NODE_NAME"

// DefaultSourceTimeout bounds one source when Options.SourceTimeout is zero:
// long enough for a busy API server, short enough that a node without IMDS
// starts promptly.
const DefaultSourceTimeout = 10 * time.Second

// ErrUnavailable is wrapped by Get's error when no source answered; the
// error's message names every source tried and why each failed.
var ErrUnavailable = errors.New("no node metadata source answered")

// Options say where Get looks.
type Options struct {
	// Sources are the sources to try, in order; the first that answers wins.
	// Empty means DefaultSources.
	Sources []string
	// IMDSEndpoint overrides the IMDS endpoint (e.g. http://127.0.0.1:1338
	// for the emulator); empty means AWS_EC2_METADATA_SERVICE_ENDPOINT, or
	// the standard address when that is unset too.
	IMDSEndpoint string
	// KubeClient reads the Node object; nil means a client built from the
	// pod's in-cluster configuration when the Kubernetes source is tried, so
	// a node where IMDS answers never talks to the API server.
	KubeClient kubernetes.Interface
	// NodeName is the Kubernetes node name; empty means $CSI_NODE_NAME.
	NodeName string
	// SourceTimeout bounds each source; zero means DefaultSourceTimeout.
	SourceTimeout time.Duration
}

// source looks the instance up in one place.
type source func(ctx context.Context, opts Options) (*Instance, error)

var sources = map[string]source{
	SourceIMDS:       fromIMDS,
	SourceKubernetes: fromKubernetes,
}

// ParseSources parses a comma-separated source list such as the
// --metadata-sources flag's "imds,kubernetes".
func ParseSources(list string) ([]string, error) {
	var out []string
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("metadata sources %q: name at least one of %s or %s", list, SourceIMDS, SourceKubernetes)
	}
	return out, validateSources(out)
}

func validateSources(names []string) error {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if _, ok := sources[n]; !ok {
			return fmt.Errorf("unknown metadata source %q: want %s or %s", n, SourceIMDS, SourceKubernetes)
		}
		if seen[n] {
			return fmt.Errorf("metadata source %q is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

// Get asks the sources in order and returns the first answer. When none
// answers, the error wraps ErrUnavailable and every source's own error.
func Get(ctx context.Context, opts Options) (*Instance, error) {
	names := opts.Sources
	if len(names) == 0 {
		names = DefaultSources
	}
	if err := validateSources(names); err != nil {
		return nil, err
	}
	if opts.SourceTimeout <= 0 {
		opts.SourceTimeout = DefaultSourceTimeout
	}
	var failures []error
	for _, name := range names {
		in, err := ask(ctx, name, opts)
		if err == nil {
			in.Source = name
			klog.V(2).InfoS("Learned node metadata", "source", name, "instanceID", in.ID,
				"instanceType", in.Type, "region", in.Region, "zone", in.Zone, "zoneID", in.ZoneID,
				"networkInterfaces", in.NetworkInterfaces, "blockDeviceMappings", len(in.BlockDeviceMappings))
			return in, nil
		}
		failures = append(failures, &sourceError{source: name, err: err})
		if ctx.Err() != nil {
			break
		}
		klog.InfoS("Node metadata source failed", "source", name, "err", err)
	}
	return nil, &unavailableError{failures: failures}
}

// ask runs one source within the per-source timeout.
func ask(ctx context.Context, name string, opts Options) (*Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.SourceTimeout)
	defer cancel()
	return sources[name](ctx, opts)
}

// sourceError is one source's failure, labelled with the source's name.
type sourceError struct {
	source string
	err    error
}

func (e *sourceError) Error() string { return e.source + ": " + e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// unavailableError says that every source failed, and why each did.
type unavailableError struct {
	failures []error
}

func (e *unavailableError) Error() string {
	parts := make([]string, len(e.failures))
	for i, f := range e.failures {
		parts[i] = f.Error()
	}
	return ErrUnavailable.Error() + ": " + strings.Join(parts, "; ")
}

func (e *unavailableError) Unwrap() []error { return append([]error{ErrUnavailable}, e.failures...) }
