// Package podevents records the node plugin's warnings as Kubernetes
// events on pods, where `kubectl describe pod` and the pod's owner see
// them beside the kubelet's: a pod whose access to its volume's key was
// revoked keeps running, and the refused republish alone is easily missed.
//
// Events go through client-go's broadcaster, which sends them in the
// background, folds repeats of one event into a count and drops floods, so
// a caller never waits for the API server.
package podevents

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Pod names the pod an event is about.
type Pod struct {
	Namespace, Name, UID string
}

// Component is the events' source component.
const Component = "diskplane-node"

// Recorder records events on pods for one node.
type Recorder struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// New starts a recorder that writes events through client, naming nodeName
// as their source host. Shutdown stops it.
func New(client kubernetes.Interface, nodeName string) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &Recorder{broadcaster: b, recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: nodeName})}
}

// Warn records a Warning event with reason and message on pod.
func (r *Recorder) Warn(pod Pod, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	r.recorder.Event(ref, corev1.EventTypeWarning, reason, message)
}

// Shutdown stops sending events; what is queued may be lost.
func (r *Recorder) Shutdown() { r.broadcaster.Shutdown() }
