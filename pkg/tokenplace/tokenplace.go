// Package tokenplace tells the node plugin where the kubelet puts a pod's
// service-account tokens in NodePublishVolume: in the volume context, or in
// the request's secrets when the driver's CSIDriver object sets
// serviceAccountTokenInSecrets. The node takes tokens only from that place,
// because the other one is filled from objects others may write (a user's
// node-publish Secret, a PersistentVolume's volumeAttributes): a token
// planted there would let one workload present another's identity.
//
// The kubelet decides from the CSIDriver object it reads at each mount, so
// the node follows the same object, watched through the API server (Watch),
// unless an operator states the place (Fixed) for a node that cannot read
// it.
package tokenplace

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ErrUnknown means the place cannot be told: the CSIDriver object is not
// there, or not read yet. A publish that needs a token must then fail (and
// be retried), never guess.
var ErrUnknown = errors.New("where the kubelet puts service-account tokens is not known")

// Fixed is a place an operator stated (the node plugin's
// --workload-identity-tokens), for nodes that do not read the CSIDriver:
// true for the request's secrets, false for its volume context.
type Fixed bool

// TokensInSecrets returns the stated place.
func (f Fixed) TokensInSecrets(context.Context) (bool, error) { return bool(f), nil }

// Unreadable is the answer of a node that cannot read its CSIDriver (no
// Kubernetes client): every question fails with Err, wrapped in
// ErrUnknown.
type Unreadable struct{ Err error }

// TokensInSecrets fails.
func (u Unreadable) TokensInSecrets(context.Context) (bool, error) {
	return false, fmt.Errorf("%w: %w", ErrUnknown, u.Err)
}

// Watch follows one CSIDriver object through a watch on the API server
// and answers from its cache, so a publish costs the API server nothing.
type Watch struct {
	driverName string
	factory    informers.SharedInformerFactory
	lister     storagelisters.CSIDriverLister
	synced     cache.InformerSynced
}

// NewWatch prepares a watch of the CSIDriver named driverName; Run starts
// it.
func NewWatch(client kubernetes.Interface, driverName string) *Watch {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", driverName).String()
	}))
	drivers := factory.Storage().V1().CSIDrivers()
	informer := drivers.Informer()
	return &Watch{driverName: driverName, factory: factory, lister: drivers.Lister(), synced: informer.HasSynced}
}

// Run watches until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	klog.V(2).InfoS("Watching the CSIDriver for where the kubelet puts service-account tokens", "csiDriver", w.driverName)
	w.factory.Start(ctx.Done())
	<-ctx.Done()
	w.factory.Shutdown()
}

// TokensInSecrets reports whether the kubelet puts the tokens in the
// request's secrets now (else in its volume context), waiting (within ctx)
// for the watch's first list. An error wraps ErrUnknown.
func (w *Watch) TokensInSecrets(ctx context.Context) (bool, error) {
	if !cache.WaitForCacheSync(ctx.Done(), w.synced) {
		return false, fmt.Errorf("%w: the CSIDriver %s has not been read from the API server yet", ErrUnknown, w.driverName)
	}
	d, err := w.lister.Get(w.driverName)
	if err != nil {
		return false, fmt.Errorf("%w: read the CSIDriver %s: %w", ErrUnknown, w.driverName, err)
	}
	in := d.Spec.ServiceAccountTokenInSecrets
	return in != nil && *in, nil
}
