package nodewitness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/diskplane/diskplane/pkg/cloud"
)

const driverName = "ebs.csi.diskplane.io"

// fakeEC2 is EC2 as the witness sees it: instance states by ID, volumes by
// ID, an error for every instance lookup when failing is set, and the
// instance IDs asked for.
type fakeEC2 struct {
	mu      sync.Mutex
	states  map[string]string
	volumes map[string]*cloud.Volume
	failing error
	asked   []string
	// volumesAsked are the volume IDs asked for.
	volumesAsked []string
	// gather, when set, holds each lookup (for up to a second) until that
	// many are in flight, as the cloud layer's batcher gathers concurrent
	// lookups into one call; peak is the most that were.
	gather, inFlight, peak int
}

// meet holds a lookup, with f.mu held on return, until gather lookups are
// in flight (at most a second), as the cloud layer's batcher gathers
// concurrent ones, and records the peak.
func (f *fakeEC2) meet() {
	f.mu.Lock()
	f.inFlight++
	f.peak = max(f.peak, f.inFlight)
	for deadline := time.Now().Add(time.Second); f.inFlight < f.gather && f.peak < f.gather && time.Now().Before(deadline); {
		f.mu.Unlock()
		time.Sleep(time.Millisecond)
		f.mu.Lock()
	}
	f.inFlight--
}

func (f *fakeEC2) GetInstance(_ context.Context, id string) (*cloud.Instance, error) {
	f.meet()
	defer f.mu.Unlock()
	f.asked = append(f.asked, id)
	if f.failing != nil {
		return nil, f.failing
	}
	s, ok := f.states[id]
	if !ok {
		return nil, fmt.Errorf("instance %s: %w", id, cloud.ErrNotFound)
	}
	return &cloud.Instance{ID: id, State: s, StateTransitionReason: "User initiated (2026-11-29 10:00:00 GMT)"}, nil
}

func (f *fakeEC2) GetVolume(_ context.Context, id string) (*cloud.Volume, error) {
	f.meet()
	defer f.mu.Unlock()
	f.volumesAsked = append(f.volumesAsked, id)
	v, ok := f.volumes[id]
	if !ok {
		return nil, fmt.Errorf("volume %s: %w", id, cloud.ErrNotFound)
	}
	return v, nil
}

func (f *fakeEC2) set(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[id] = state
}

// node is a Node with a Ready condition and, when id is set, an aws://
// providerID.
func node(name, id string, ready corev1.ConditionStatus, taints ...corev1.Taint) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	if id != "" {
		n.Spec.ProviderID = "aws:///us-east-1a/" + id
	}
	return n
}

type fixture struct {
	kube     *fake.Clientset
	ec2      *fakeEC2
	events   *record.FakeRecorder
	registry *prometheus.Registry
	w        *Witness
}

func newFixture(t *testing.T, objects ...any) *fixture {
	t.Helper()
	f := &fixture{kube: fake.NewClientset(), ec2: &fakeEC2{states: map[string]string{}, volumes: map[string]*cloud.Volume{}},
		events: record.NewFakeRecorder(100), registry: prometheus.NewRegistry()}
	for _, o := range objects {
		var err error
		switch o := o.(type) {
		case *corev1.Node:
			_, err = f.kube.CoreV1().Nodes().Create(t.Context(), o, metav1.CreateOptions{})
		case *storagev1.CSINode:
			_, err = f.kube.StorageV1().CSINodes().Create(t.Context(), o, metav1.CreateOptions{})
		case *storagev1.VolumeAttachment:
			_, err = f.kube.StorageV1().VolumeAttachments().Create(t.Context(), o, metav1.CreateOptions{})
		case *corev1.PersistentVolume:
			_, err = f.kube.CoreV1().PersistentVolumes().Create(t.Context(), o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	w, err := New(f.kube, f.ec2, Config{DriverName: driverName, Recorder: f.events, Registerer: f.registry})
	if err != nil {
		t.Fatal(err)
	}
	f.w = w
	return f
}

func (f *fixture) sync(t *testing.T) {
	t.Helper()
	if err := f.w.Sync(t.Context()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func (f *fixture) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := f.kube.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *fixture) setReady(t *testing.T, name string, ready corev1.ConditionStatus) {
	t.Helper()
	n := f.node(t, name)
	n.Status.Conditions[0].Status = ready
	if _, err := f.kube.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// value is a counter's or gauge's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

// event returns the next recorded event, or "" when there is none.
func (f *fixture) event() string {
	select {
	case e := <-f.events.Events:
		return e
	default:
		return ""
	}
}

func TestALostNodeIsTaintedAndUntainted(t *testing.T) {
	const a, b = "i-0000000000000000a", "i-0000000000000000b"
	f := newFixture(t, node("worker-1", a, corev1.ConditionTrue), node("worker-2", b, corev1.ConditionTrue))
	f.ec2.set(a, cloud.InstanceRunning)
	f.ec2.set(b, cloud.InstanceRunning)

	f.sync(t)
	if len(f.ec2.asked) != 0 {
		t.Fatalf("Ready Nodes made the witness ask EC2 about %v", f.ec2.asked)
	}

	// worker-1's machine stops: its Node goes unreachable.
	f.ec2.set(a, cloud.InstanceStopped)
	f.setReady(t, "worker-1", corev1.ConditionUnknown)
	f.sync(t)
	n := f.node(t, "worker-1")
	if !hasTaint(n) || n.Spec.Taints[0].Value != TaintValue || n.Spec.Taints[0].Effect != corev1.TaintEffectNoExecute || n.Spec.Taints[0].TimeAdded == nil {
		t.Fatalf("the stopped instance's Node has taints %+v", n.Spec.Taints)
	}
	if ev := n.Annotations[driverName+AnnotationSuffix]; !strings.Contains(ev, "EC2 reports instance "+a+" stopped: User initiated") {
		t.Fatalf("the annotation's evidence: %q", ev)
	}
	if e := f.event(); !strings.HasPrefix(e, "Warning "+ReasonTainted) || !strings.Contains(e, a+" stopped") {
		t.Fatalf("event: %q", e)
	}
	if hasTaint(f.node(t, "worker-2")) {
		t.Fatal("the Ready Node was tainted")
	}
	if got := value(t, f.w.tainted); got != 1 {
		t.Fatalf("tainted nodes gauge = %v", got)
	}

	// Looking again changes nothing and records nothing.
	f.sync(t)
	if e := f.event(); e != "" {
		t.Fatalf("a second look recorded %q", e)
	}
	if got := value(t, f.w.decisions.WithLabelValues(string(Keep))); got != 1 {
		t.Fatalf("keep decisions = %v", got)
	}

	// It runs again, but its Node is not Ready yet: the taint stays.
	f.ec2.set(a, cloud.InstanceRunning)
	f.sync(t)
	if !hasTaint(f.node(t, "worker-1")) {
		t.Fatal("the taint went before the Node was Ready")
	}
	f.setReady(t, "worker-1", corev1.ConditionTrue)
	f.sync(t)
	n = f.node(t, "worker-1")
	if hasTaint(n) || n.Annotations[driverName+AnnotationSuffix] != "" {
		t.Fatalf("the Ready, running Node keeps %+v, %v", n.Spec.Taints, n.Annotations)
	}
	if e := f.event(); !strings.HasPrefix(e, "Normal "+ReasonUntainted) {
		t.Fatalf("event: %q", e)
	}
	if got := value(t, f.w.tainted); got != 0 {
		t.Fatalf("tainted nodes gauge = %v", got)
	}
}

func TestARunningInstanceIsNeverTainted(t *testing.T) {
	const a = "i-0000000000000000a"
	f := newFixture(t, node("worker-1", a, corev1.ConditionUnknown))
	f.ec2.set(a, cloud.InstanceRunning)
	f.sync(t)
	if hasTaint(f.node(t, "worker-1")) {
		t.Fatal("a Node whose instance runs was tainted")
	}
	if got := value(t, f.w.decisions.WithLabelValues(string(InstanceRunning))); got != 1 {
		t.Fatalf("instance-running decisions = %v", got)
	}

	// Nor when EC2 cannot be asked.
	f.ec2.failing = fmt.Errorf("unavailable: %w", cloud.ErrUnavailable)
	f.sync(t)
	if hasTaint(f.node(t, "worker-1")) {
		t.Fatal("a Node was tainted while EC2 could not be asked")
	}
	if got := value(t, f.w.decisions.WithLabelValues(string(Undecided))); got != 1 {
		t.Fatalf("undecided decisions = %v", got)
	}
}

func TestATaintRemovedByHandTakesTheAnnotation(t *testing.T) {
	const a = "i-0000000000000000a"
	f := newFixture(t, node("worker-1", a, corev1.ConditionUnknown))
	f.ec2.set(a, cloud.InstanceStopped)
	f.sync(t)
	f.event()
	// Back, and a human removed the taint first, leaving the annotation.
	n := f.node(t, "worker-1")
	n.Spec.Taints = nil
	n.Status.Conditions[0].Status = corev1.ConditionTrue
	if _, err := f.kube.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.ec2.set(a, cloud.InstanceRunning)
	f.sync(t)
	if n := f.node(t, "worker-1"); hasTaint(n) || n.Annotations[driverName+AnnotationSuffix] != "" {
		t.Fatalf("after the taint was removed by hand: taints %+v, annotations %v", n.Spec.Taints, n.Annotations)
	}
	if e := f.event(); e != "" {
		t.Fatalf("removing only the annotation recorded %q", e)
	}
}

func TestAnotherTaintIsNotTheWitnesss(t *testing.T) {
	const a = "i-0000000000000000a"
	operators := corev1.Taint{Key: TaintKey, Value: TaintValue, Effect: corev1.TaintEffectNoExecute}
	f := newFixture(t, node("worker-1", a, corev1.ConditionTrue, operators))
	f.ec2.set(a, cloud.InstanceRunning)
	f.sync(t)
	if !hasTaint(f.node(t, "worker-1")) {
		t.Fatal("the witness removed an out-of-service taint it did not add")
	}
}

func TestTheInstanceFromTheCSINode(t *testing.T) {
	const a = "i-0000000000000000a"
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}, Spec: storagev1.CSINodeSpec{
		Drivers: []storagev1.CSINodeDriver{{Name: "other.csi.example.com", NodeID: "node-1"}, {Name: driverName, NodeID: a}}}}
	f := newFixture(t, node("worker-1", "", corev1.ConditionFalse), csiNode, node("worker-2", "", corev1.ConditionFalse))
	f.ec2.set(a, cloud.InstanceTerminated)
	f.sync(t)
	if !hasTaint(f.node(t, "worker-1")) {
		t.Fatal("the Node whose CSINode names a terminated instance was not tainted")
	}
	if hasTaint(f.node(t, "worker-2")) {
		t.Fatal("a Node naming no instance was tainted")
	}
	if len(f.ec2.asked) != 1 || f.ec2.asked[0] != a {
		t.Fatalf("asked EC2 about %v", f.ec2.asked)
	}
}

func TestAnInstanceEC2DoesNotKnow(t *testing.T) {
	f := newFixture(t, node("worker-1", "i-0000000000000000a", corev1.ConditionUnknown))
	f.sync(t)
	if n := f.node(t, "worker-1"); !hasTaint(n) || !strings.Contains(n.Annotations[driverName+AnnotationSuffix], "does not know") {
		t.Fatalf("a Node whose instance EC2 does not know: %+v, %v", n.Spec.Taints, n.Annotations)
	}
}

func TestLostNodesAreAskedAboutTogether(t *testing.T) {
	ids := []string{"i-0000000000000000a", "i-0000000000000000b", "i-0000000000000000c"}
	var objects []any
	for i, id := range ids {
		objects = append(objects, node(fmt.Sprintf("worker-%d", i+1), id, corev1.ConditionUnknown))
	}
	f := newFixture(t, objects...)
	for _, id := range ids {
		f.ec2.set(id, cloud.InstanceStopped)
	}
	f.ec2.gather = len(ids)
	f.sync(t)
	if f.ec2.peak != len(ids) {
		t.Fatalf("at most %d of the %d lost nodes' lookups were in flight at once; they should meet in one batch", f.ec2.peak, len(ids))
	}
	for i := range ids {
		if !hasTaint(f.node(t, fmt.Sprintf("worker-%d", i+1))) {
			t.Fatalf("worker-%d was not tainted", i+1)
		}
	}
	if got := value(t, f.w.tainted); got != float64(len(ids)) {
		t.Fatalf("tainted nodes gauge = %v", got)
	}
}
