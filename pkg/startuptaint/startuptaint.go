// Package startuptaint removes the node plugin's startup taint from its own
// Node once the plugin can serve volumes there.
//
// Operators add the taint <driver-name>/agent-not-ready:NoExecute to new
// nodes (in the node group's launch settings, Karpenter's startupTaints or
// the kubelet's --register-with-taints). The scheduler then keeps pods that
// need volumes off a node until the Diskplane node plugin has registered
// with the kubelet there; without it, a pod scheduled in the first seconds
// of a node's life fails its first mount attempts with "driver not found".
// The node DaemonSet tolerates the taint, starts, registers, and Run takes
// the taint away.
//
// Run changes nothing but that taint, on nothing but the Node named by the
// caller (the pod's own node, from the downward API). It needs get and
// patch on nodes and get on csinodes. Kubernetes RBAC cannot
// scope a DaemonSet's permission to "its own" Node by name, so the chart
// grants patch on nodes and adds an admission policy that enforces both
// limits; this package keeps within them.
package startuptaint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/kubeclient"
)

// KeySuffix follows the driver name in the taint key.
const KeySuffix = "/agent-not-ready"

// Key is the startup taint key of driverName, e.g.
// ebs.csi.diskplane.io/agent-not-ready.
func Key(driverName string) string { return driverName + KeySuffix }

// ReadyFunc reports whether the plugin can serve volumes on this node yet;
// an error counts as "not yet" and is logged.
type ReadyFunc func(ctx context.Context) (bool, error)

// Defaults for the zero values of Config's timing fields.
const (
	// DefaultReadyInterval is how often Run asks Ready: registration usually
	// completes within a second of the plugin starting.
	DefaultReadyInterval = time.Second
	// DefaultInitialBackoff and DefaultMaxBackoff bound the wait between
	// failed attempts to remove the taint: quick enough to recover from a
	// conflicting write at once, slow enough not to hammer an API server
	// that is down or refuses the request.
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
)

// Config says which taint Run removes from which node, and when.
type Config struct {
	// Client reaches the API server; nil means a client built from the
	// pod's in-cluster configuration.
	Client kubernetes.Interface
	// NodeName names this node's Node object (the DaemonSet sets
	// CSI_NODE_NAME from spec.nodeName).
	NodeName string
	// DriverName is the CSI driver name; the taint key is Key(DriverName).
	DriverName string
	// Ready gates the removal; nil means RegisteredInCSINode, which works
	// whether the plugin registers itself or node-driver-registrar does.
	Ready ReadyFunc
	// ReadyInterval is how often Ready is asked; zero means
	// DefaultReadyInterval.
	ReadyInterval time.Duration
	// InitialBackoff and MaxBackoff bound the exponential wait between
	// failed removal attempts; zero means the defaults above.
	InitialBackoff, MaxBackoff time.Duration
}

// Run waits until cfg.Ready reports true (by default: until the kubelet has
// registered the driver on this node) and then removes every taint with
// the key Key(cfg.DriverName) from the Node cfg.NodeName, retrying failed
// attempts with capped exponential backoff. It returns nil once the Node
// carries no such taint (at once when it never had one), or the context's
// error when ctx ends first. A Forbidden answer means the cluster does not
// allow the removal (the chart's node.startupTaint.remove=false, or the
// admission policy refused): Run returns it at once instead of asking
// again forever. It never changes anything else on the Node.
func Run(ctx context.Context, cfg Config) error {
	if cfg.NodeName == "" {
		return errors.New("startup taint: node name is empty (set CSI_NODE_NAME from spec.nodeName)")
	}
	if cfg.DriverName == "" {
		return errors.New("startup taint: driver name is empty")
	}
	cfg = withDefaults(cfg)
	if cfg.Client == nil {
		client, err := kubeclient.InCluster()
		if err != nil {
			return fmt.Errorf("startup taint: %w", err)
		}
		cfg.Client = client
	}
	if cfg.Ready == nil {
		cfg.Ready = RegisteredInCSINode(cfg.Client, cfg.NodeName, cfg.DriverName)
	}
	if err := waitReady(ctx, cfg); err != nil {
		return fmt.Errorf("startup taint: waiting for the plugin to be ready: %w", err)
	}
	return removeWithBackoff(ctx, cfg)
}

func withDefaults(cfg Config) Config {
	if cfg.ReadyInterval <= 0 {
		cfg.ReadyInterval = DefaultReadyInterval
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.InitialBackoff {
		cfg.MaxBackoff = cfg.InitialBackoff
	}
	return cfg
}

// waitReady polls cfg.Ready until it reports true or ctx ends.
func waitReady(ctx context.Context, cfg Config) error {
	return wait.PollUntilContextCancel(ctx, cfg.ReadyInterval, true, func(ctx context.Context) (bool, error) {
		ready, err := cfg.Ready(ctx)
		if apierrors.IsForbidden(err) {
			return false, err
		}
		if err != nil {
			klog.V(4).InfoS("Plugin not ready yet; keeping the startup taint", "node", cfg.NodeName, "err", err)
			return false, nil
		}
		return ready, nil
	})
}

// removeWithBackoff repeats removeOnce until it succeeds or ctx ends.
func removeWithBackoff(ctx context.Context, cfg Config) error {
	key := Key(cfg.DriverName)
	delay := cfg.InitialBackoff
	for attempt := 1; ; attempt++ {
		removed, err := removeOnce(ctx, cfg.Client, cfg.NodeName, key)
		if err == nil {
			if removed {
				klog.InfoS("Removed the startup taint", "node", cfg.NodeName, "taint", key, "attempts", attempt)
			} else {
				klog.V(2).InfoS("Node has no startup taint", "node", cfg.NodeName, "taint", key)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("startup taint %s on node %s: %w (last error: %w)", key, cfg.NodeName, ctx.Err(), err)
		}
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("startup taint %s on node %s: the cluster does not let this plugin remove it: %w", key, cfg.NodeName, err)
		}
		// A conflict only means someone changed the taints between our read
		// and our write; anything else (API server down or overloaded)
		// deserves an error in the log. Both wait, so that a failure that
		// persists is not repeated in a tight loop.
		if isConflict(err) {
			klog.V(2).InfoS("Node changed while removing the startup taint; reading it again", "node", cfg.NodeName,
				"taint", key, "attempt", attempt, "retryIn", delay, "err", err)
		} else {
			klog.ErrorS(err, "Could not remove the startup taint; retrying", "node", cfg.NodeName, "taint", key,
				"attempt", attempt, "retryIn", delay)
		}
		wait := delay
		delay = min(2*delay, cfg.MaxBackoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("startup taint %s on node %s: %w (last error: %w)", key, cfg.NodeName, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// removeOnce reads the Node and, when it carries taints with key, writes
// the taint list back without them. The write is a JSON patch that first
// tests the taint list is still what was read, so a taint someone else
// added or removed meanwhile is never lost: the test fails and the caller
// reads again. It reports whether it removed anything.
func removeOnce(ctx context.Context, client kubernetes.Interface, nodeName, key string) (bool, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("get node %s: %w", nodeName, err)
	}
	kept := make([]corev1.Taint, 0, len(node.Spec.Taints))
	for _, t := range node.Spec.Taints {
		if t.Key != key {
			kept = append(kept, t)
		}
	}
	if len(kept) == len(node.Spec.Taints) {
		return false, nil
	}
	patch, err := taintPatch(node.Spec.Taints, kept)
	if err != nil {
		return false, err
	}
	klog.V(4).InfoS("Patching node taints", "node", nodeName, "taint", key, "before", len(node.Spec.Taints), "after", len(kept))
	if _, err := client.CoreV1().Nodes().Patch(ctx, nodeName, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("patch taints of node %s: %w", nodeName, err)
	}
	return true, nil
}

// patchOp is one RFC 6902 JSON patch operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// taintPatch builds the test-then-write patch from the taints read to the
// taints kept.
func taintPatch(read, kept []corev1.Taint) ([]byte, error) {
	ops := []patchOp{{Op: "test", Path: "/spec/taints", Value: read}}
	if len(kept) == 0 {
		ops = append(ops, patchOp{Op: "remove", Path: "/spec/taints"})
	} else {
		ops = append(ops, patchOp{Op: "replace", Path: "/spec/taints", Value: kept})
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encode taint patch: %w", err)
	}
	return b, nil
}

// isConflict tells whether err means the Node changed under us: an
// optimistic-concurrency conflict, or the patch's test operation failing
// (which the API server reports as an invalid or unprocessable request).
func isConflict(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}
