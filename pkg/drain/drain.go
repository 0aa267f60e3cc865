// Package drain keeps a node plugin alive while the node it runs on goes
// away with volumes still attached. When a node is drained or shut down,
// the kubelet stops the pods that use volumes and the node plugin at about
// the same time; a plugin that exits first leaves the volumes mounted, so
// the kubelet never reports them unmounted, the attach/detach controller
// never detaches them, and Kubernetes force-detaches them six minutes
// later. Wait is the node plugin's preStop hook: on a node that is going
// away it returns only once every VolumeAttachment of the driver on the
// node is gone (the volumes are unmounted and detached), bounded by the
// pod's termination grace period, which the kubelet enforces. On a node
// that stays (a rolling update of the plugin) it returns at once: mounts
// outlive the plugin, and the next one serves them.
package drain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/kubeclient"
)

// DefaultPollInterval is how often Wait looks at the node and its
// VolumeAttachments.
const DefaultPollInterval = 2 * time.Second

// Taints that tools put on a node they are about to remove, besides
// Kubernetes' own (node.kubernetes.io/unschedulable, out-of-service).
const (
	// TaintClusterAutoscaler marks a node the cluster autoscaler drains and deletes.
	TaintClusterAutoscaler = "ToBeDeletedByClusterAutoscaler"
	// TaintKarpenterDisrupted marks a node Karpenter (v1) drains and terminates.
	TaintKarpenterDisrupted = "karpenter.sh/disrupted"
	// TaintKarpenterDisruption is the same for Karpenter before v1 (value disrupting).
	TaintKarpenterDisruption = "karpenter.sh/disruption"
)

// shutdownMessage is how the kubelet's Ready condition says that a graceful
// node shutdown is under way.
const shutdownMessage = "node is shutting down"

// Config is what Wait needs.
type Config struct {
	// Client reaches the API server; nil builds one from the pod's service
	// account.
	Client kubernetes.Interface
	// NodeName is the node the plugin runs on (CSI_NODE_NAME).
	NodeName string
	// DriverName is the CSI driver name: the attacher of the
	// VolumeAttachments to wait for.
	DriverName string
	// PollInterval is how often to look; zero means DefaultPollInterval.
	PollInterval time.Duration
}

// Reason says why a node is going away, or "" when nothing says it is:
// cordoned (spec.unschedulable, as kubectl drain does), being deleted, tainted
// by the cluster autoscaler, Karpenter or a non-graceful shutdown
// (out-of-service), or shutting down (the kubelet's graceful node shutdown).
func Reason(node *corev1.Node) string {
	switch {
	case node.DeletionTimestamp != nil:
		return "the Node is being deleted"
	case node.Spec.Unschedulable:
		return "the node is cordoned"
	}
	for _, t := range node.Spec.Taints {
		switch t.Key {
		case corev1.TaintNodeUnschedulable, TaintClusterAutoscaler, TaintKarpenterDisrupted, TaintKarpenterDisruption,
			corev1.TaintNodeOutOfService:
			return "the node has the taint " + t.Key
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue && strings.Contains(c.Message, shutdownMessage) {
			return "the kubelet is shutting the node down"
		}
	}
	return ""
}

// Wait is the preStop hook: on a node that is going away (Reason) it waits
// until no VolumeAttachment of the driver names the node, or until ctx
// ends; on any other node it returns at once. It looks again at every
// poll, so a drain that is called off (the node uncordoned) ends the wait.
func Wait(ctx context.Context, cfg Config) error {
	if cfg.NodeName == "" || cfg.DriverName == "" {
		return errors.New("the node name and the driver name are required")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Client == nil {
		c, err := kubeclient.InCluster()
		if err != nil {
			return err
		}
		cfg.Client = c
	}
	start := time.Now()
	var last []string
	for first := true; ; first = false {
		reason, err := goingAway(ctx, cfg)
		if err != nil {
			return err
		}
		if reason == "" {
			if first {
				klog.InfoS("The node is not going away; the plugin may stop now, its volumes stay mounted", "node", cfg.NodeName)
			} else {
				klog.InfoS("The node is no longer going away; the plugin may stop now", "node", cfg.NodeName, "waited", time.Since(start).Round(time.Second))
			}
			return nil
		}
		attached, err := attachments(ctx, cfg)
		if err != nil {
			return err
		}
		if len(attached) == 0 {
			klog.InfoS("No volume of the driver is attached to the node any more; the plugin may stop now", "node", cfg.NodeName,
				"reason", reason, "waited", time.Since(start).Round(time.Second))
			return nil
		}
		if !slices.Equal(attached, last) {
			klog.InfoS("Waiting before the plugin stops until the node's volumes are unmounted and detached", "node", cfg.NodeName,
				"reason", reason, "volumeAttachments", attached)
			last = attached
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting for the detach of %s after %s: %w", strings.Join(attached, ", "),
				time.Since(start).Round(time.Second), ctx.Err())
		case <-time.After(cfg.PollInterval):
		}
	}
}

// goingAway is Reason for the named node; a Node that is gone is going away.
func goingAway(ctx context.Context, cfg Config) (string, error) {
	node, err := cfg.Client.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "the Node is deleted", nil
	}
	if err != nil {
		return "", fmt.Errorf("get Node %s: %w", cfg.NodeName, err)
	}
	return Reason(node), nil
}

// attachments lists the VolumeAttachments of the driver on the node, as
// "name (persistent volume)", sorted. They are read from the API server's
// cache (resourceVersion 0), which is cheap for it.
func attachments(ctx context.Context, cfg Config) ([]string, error) {
	list, err := cfg.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list VolumeAttachments: %w", err)
	}
	var out []string
	for _, va := range list.Items {
		if va.Spec.Attacher != cfg.DriverName || va.Spec.NodeName != cfg.NodeName {
			continue
		}
		name := va.Name
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
			name += " (" + *pv + ")"
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}
