// Package nodewitness lets EC2 testify that a lost node's machine is off,
// so that Kubernetes' non-graceful node shutdown proceeds without a human.
//
// When a node's kubelet stops reporting, Kubernetes cannot tell a machine
// that is off from one that is cut off and still writing: its pods stay
// Terminating, and their volumes stay attached there (a Multi-Attach error
// for their successors) until someone confirms the machine is off with the
// out-of-service taint (node.kubernetes.io/out-of-service=nodeshutdown:
// NoExecute), after which Kubernetes deletes the pods and detaches their
// volumes at once. The driver can ask EC2 the one question that person
// answers. The Witness, run by the controller's leader, looks at the Nodes
// every interval: a Node that is not Ready and whose instance EC2 reports
// stopping, stopped, shutting-down, terminated or unknown gets the taint,
// with an event naming the evidence; the taint goes when the Node is Ready
// and its instance runs again. A running instance is never tainted,
// whatever its Node says, and an out-of-service taint that the witness did
// not add is never removed: an annotation on the Node marks its own.
//
// A node that hangs is the other half: its instance runs, so it is never
// tainted, but a detach from it (after a human's taint or Kubernetes'
// six-minute forced detach) stays detaching in EC2 while its guest holds
// the device. The witness measures every detach that Kubernetes asked for
// and EC2 has not finished (diskplane_detach_pending_seconds), and names a
// stuck one within a minute with an event on its PersistentVolume and its
// Node that says what to do: stop the instance. It never detaches anything
// itself (syncDetaches).
//
// It needs get, list and update on nodes, get on csinodes (to find an
// instance without an aws:// providerID), list on volumeattachments, get
// on persistentvolumes and create on events.
package nodewitness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/cloud/metadata"
)

// The out-of-service taint, as Kubernetes' non-graceful node shutdown
// defines it.
const (
	TaintKey   = "node.kubernetes.io/out-of-service"
	TaintValue = "nodeshutdown"
)

// AnnotationSuffix follows the driver name in the annotation that marks
// the witness's own taint (<driver-name>/out-of-service-witness); its value
// is the evidence.
const AnnotationSuffix = "/out-of-service-witness"

// Event reasons on the Node.
const (
	ReasonTainted   = "OutOfServiceTaintAdded"
	ReasonUntainted = "OutOfServiceTaintRemoved"
)

// DefaultInterval is how often the witness looks when Config leaves it
// zero: a lost node's pods wait at most this beyond Kubernetes' own
// node-monitor grace period.
const DefaultInterval = 10 * time.Second

// EC2 is what the witness asks EC2: an instance's state and a volume's
// attachments, or cloud.ErrNotFound for what EC2 does not know.
// cloud.Cloud has both, batched with concurrent lookups.
type EC2 interface {
	GetInstance(ctx context.Context, instanceID string) (*cloud.Instance, error)
	GetVolume(ctx context.Context, volumeID string) (*cloud.Volume, error)
}

// Config is a Witness's setting.
type Config struct {
	// DriverName is the CSI driver's name: its CSINode entry names a
	// Node's instance, and the annotation key starts with it.
	DriverName string
	// Interval is how often Run looks; zero means DefaultInterval.
	Interval time.Duration
	// Recorder records the events on Nodes; nil records none.
	Recorder record.EventRecorder
	// Registerer, when set, gets the witness's metrics.
	Registerer prometheus.Registerer
}

// Witness taints and untaints Nodes on EC2's evidence, and names the
// detaches that a running instance holds up.
type Witness struct {
	kube      kubernetes.Interface
	ec2       EC2
	cfg       Config
	decisions *prometheus.CounterVec
	tainted   prometheus.Gauge
	pending   *prometheus.GaugeVec
	// reported holds the UIDs of the VolumeAttachments whose stuck detach
	// has had its events, until they are gone.
	reported map[string]bool
}

// New returns a witness; it does nothing until Run or Sync.
func New(kube kubernetes.Interface, ec2 EC2, cfg Config) (*Witness, error) {
	if cfg.DriverName == "" {
		return nil, errors.New("nodewitness: no driver name")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	w := &Witness{kube: kube, ec2: ec2, cfg: cfg, reported: map[string]bool{},
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "diskplane_node_witness_decisions_total",
			Help: "Decisions of the node witness about Nodes that are not Ready or carry its taint, by decision (taint, untaint, keep, instance-running, undecided).",
		}, []string{"decision"}),
		tainted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "diskplane_node_witness_tainted_nodes",
			Help: "Nodes carrying the out-of-service taint that the node witness added, as of its last look.",
		}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "diskplane_detach_pending_seconds",
			Help: "Seconds since Kubernetes asked to detach a volume that EC2 still shows attached to the node's instance, by volume, node and EC2 attachment state (attached, detaching, busy), as of the node witness's last look.",
		}, []string{"volume_id", "node", "state"}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{w.decisions, w.tainted, w.pending} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("nodewitness: %w", err)
			}
		}
	}
	return w, nil
}

// annotation is the key that marks the witness's own taint.
func (w *Witness) annotation() string { return w.cfg.DriverName + AnnotationSuffix }

// Run looks every interval until ctx ends; a look that fails is logged
// and the next one tries again.
func (w *Witness) Run(ctx context.Context) {
	klog.InfoS("Node witness started: NotReady Nodes whose instance EC2 reports off get the out-of-service taint", "interval", w.cfg.Interval)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := w.Sync(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Node witness could not look at the Nodes or their pending detaches")
		}
	}, w.cfg.Interval)
}

// Sync looks at every Node and every pending detach once and acts on each
// decision. It fails only when the Nodes or VolumeAttachments cannot be
// listed; a Node it could not change is logged and tried again next time.
func (w *Witness) Sync(ctx context.Context) error {
	// From the API server's cache: the witness reads every Node often.
	nodes, err := w.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	// The Nodes to look at are asked about at once, so that their
	// instances' lookups meet in the cloud layer's batcher: one
	// DescribeInstances for a zone's worth of lost nodes, not one each.
	var (
		ours  atomic.Int64
		wg    sync.WaitGroup
		slots = make(chan struct{}, maxConcurrentLooks)
	)
	for i := range nodes.Items {
		node := &nodes.Items[i]
		f, look := w.facts(node)
		if !look {
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if w.syncNode(ctx, node, f) {
				ours.Add(1)
			}
		}()
	}
	wg.Wait()
	w.tainted.Set(float64(ours.Load()))
	byName := make(map[string]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		byName[nodes.Items[i].Name] = &nodes.Items[i]
	}
	return w.syncDetaches(ctx, byName)
}

// maxConcurrentLooks bounds the Nodes a Sync looks at at once.
const maxConcurrentLooks = 32

// facts is what the Node itself says; look is false for the usual case,
// a Ready Node without the witness's annotation, which needs no question
// to EC2.
func (w *Witness) facts(node *corev1.Node) (f facts, look bool) {
	f = facts{ready: readyStatus(node), tainted: hasTaint(node)}
	_, f.ours = node.Annotations[w.annotation()]
	return f, f.ready != corev1.ConditionTrue || f.ours
}

// syncNode completes the facts about one Node with EC2's, decides and
// acts; it reports whether the Node carries the witness's taint afterwards.
func (w *Witness) syncNode(ctx context.Context, node *corev1.Node, f facts) bool {
	f.instanceID = w.instanceOf(ctx, node)
	if f.instanceID != "" {
		in, err := w.ec2.GetInstance(ctx, f.instanceID)
		switch {
		case err == nil:
			f.instance = in
		case !errors.Is(err, cloud.ErrNotFound):
			f.lookupErr = err
		}
	}
	decision, evidence := decide(f)
	w.decisions.WithLabelValues(string(decision)).Inc()
	switch decision {
	case Taint:
		if err := w.taint(ctx, node.Name, evidence); err != nil {
			klog.ErrorS(err, "Could not add the out-of-service taint", "node", node.Name, "instanceID", f.instanceID, "evidence", evidence)
			return false
		}
		klog.InfoS("Node tainted out-of-service on EC2's evidence", "node", node.Name, "instanceID", f.instanceID, "evidence", evidence)
		w.event(node, corev1.EventTypeWarning, ReasonTainted, "Added "+TaintKey+"="+TaintValue+":NoExecute: "+evidence+
			"; Kubernetes deletes the node's pods and detaches their volumes now (non-graceful node shutdown)")
		return true
	case Untaint:
		if err := w.untaint(ctx, node.Name); err != nil {
			klog.ErrorS(err, "Could not remove the out-of-service taint", "node", node.Name, "instanceID", f.instanceID)
			return true
		}
		klog.InfoS("Node's out-of-service taint removed", "node", node.Name, "instanceID", f.instanceID, "evidence", evidence)
		if f.tainted {
			w.event(node, corev1.EventTypeNormal, ReasonUntainted, "Removed "+TaintKey+": "+evidence)
		}
		return false
	case InstanceRunning, Undecided:
		klog.V(2).InfoS("Node is not Ready; not tainted", "node", node.Name, "instanceID", f.instanceID, "decision", decision, "evidence", evidence)
	default:
		klog.V(4).InfoS("Node witness decision", "node", node.Name, "decision", decision, "evidence", evidence)
	}
	return f.tainted && f.ours
}

// instanceOf is the Node's instance: from its aws:// providerID, else from
// the CSI node plugin's registration (its CSINode's node ID is the
// instance ID); "" when neither names one.
func (w *Witness) instanceOf(ctx context.Context, node *corev1.Node) string {
	if _, id, err := metadata.ParseProviderID(node.Spec.ProviderID); err == nil {
		return id
	}
	csiNode, err := w.kube.StorageV1().CSINodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			klog.V(2).InfoS("Could not read the Node's CSINode", "node", node.Name, "err", err)
		}
		return ""
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == w.cfg.DriverName {
			return d.NodeID
		}
	}
	return ""
}

// taint adds the out-of-service taint and the witness's annotation, unless
// the Node has meanwhile become Ready or got the taint from elsewhere.
func (w *Witness) taint(ctx context.Context, name, evidence string) error {
	return w.update(ctx, name, func(n *corev1.Node) bool {
		if hasTaint(n) || readyStatus(n) == corev1.ConditionTrue {
			return false
		}
		now := metav1.Now()
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintKey, Value: TaintValue, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now})
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[w.annotation()] = evidence
		return true
	})
}

// untaint removes the out-of-service taint and the annotation, if the
// annotation is still there (a human who took the taint over by removing
// the annotation keeps it).
func (w *Witness) untaint(ctx context.Context, name string) error {
	return w.update(ctx, name, func(n *corev1.Node) bool {
		if _, ok := n.Annotations[w.annotation()]; !ok {
			return false
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintKey })
		delete(n.Annotations, w.annotation())
		return true
	})
}

// update reads the Node, lets change edit it (false: nothing to do) and
// writes it, again from a fresh read when another writer came between.
func (w *Witness) update(ctx context.Context, name string, change func(*corev1.Node) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := w.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !change(n) {
			return nil
		}
		_, err = w.kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// event records an event on the Node, when there is a recorder.
func (w *Witness) event(node *corev1.Node, kind, reason, message string) {
	if w.cfg.Recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}
	w.cfg.Recorder.Event(ref, kind, reason, message)
}

// readyStatus is the Node's Ready condition, "" when it has none.
func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// hasTaint reports whether the Node carries the out-of-service taint.
func hasTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintKey })
}
