// Package snapshotintent records, on a VolumeSnapshotContent through the
// Kubernetes API, which controller process may have asked EC2 for its
// snapshot.
//
// EC2's CreateSnapshot has no ClientToken, and EC2's reads lag behind its
// writes by up to the visibility window (tags included), so a controller
// that has just started cannot tell from EC2 whether a predecessor sent a
// CreateSnapshot for a name whose snapshot does not show yet: without more,
// it must wait out the window after its start before it sends one itself.
// The API server's reads are strongly consistent. A process writes its
// identity in an annotation of the content before it sends anything for
// the content's snapshot; a successor that reads no other process's
// identity there knows that no predecessor sent anything, and sends at
// once. The write is conditional on the content's resourceVersion, so of
// two processes recording at once, the second one sees the first.
//
// Every controller process of a cluster must record: one that sends
// without recording (an older version, or one run without access to the
// API) is invisible to its successors.
package snapshotintent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// Contents is the API resource of VolumeSnapshotContents, which the
// external-snapshotter's CRDs define.
var Contents = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}

// AnnotationName is the name, below the driver's name as its prefix, of the
// annotation that names the last process that may have sent CreateSnapshot
// for the content: <driver-name>/create-snapshot-sent-by.
const AnnotationName = "create-snapshot-sent-by"

// conflictAttempts bounds the read-and-write rounds of one record when
// other writers (the snapshotter's own updates) change the content in
// between.
const conflictAttempts = 5

// Ledger records this process's intents on VolumeSnapshotContents.
type Ledger struct {
	contents dynamic.NamespaceableResourceInterface
	key      string
	process  string
}

// New returns the ledger of this process for the driver named driverName.
// The process is known by the host's name (the pod's) and a random suffix:
// a restarted container is another process, which may have sent requests
// its successor does not know of.
func New(client dynamic.Interface, driverName string) (*Ledger, error) {
	suffix := make([]byte, 6)
	if _, err := rand.Read(suffix); err != nil {
		return nil, err
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	return &Ledger{
		contents: client.Resource(Contents),
		key:      driverName + "/" + AnnotationName,
		process:  host + "-" + hex.EncodeToString(suffix),
	}, nil
}

// For is the intent record of the snapshot of VolumeSnapshotContent
// content.
func (l *Ledger) For(content string) cloud.SnapshotIntent {
	return intent{ledger: l, content: content}
}

// intent is one content's record.
type intent struct {
	ledger  *Ledger
	content string
}

// Record writes this process into the content's annotation, unless it is
// there already, and reports whether another process was there before.
func (i intent) Record(ctx context.Context) (bool, error) {
	l := i.ledger
	for attempt := 1; ; attempt++ {
		obj, err := l.contents.Get(ctx, i.content, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("read VolumeSnapshotContent %s: %w", i.content, err)
		}
		before := obj.GetAnnotations()[l.key]
		if before == l.process {
			return false, nil
		}
		// A merge patch that names the resourceVersion read is refused
		// (Conflict) when anything changed the content since.
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": obj.GetResourceVersion(),
			"annotations":     map[string]string{l.key: l.process},
		}})
		if err != nil {
			return false, err
		}
		_, err = l.contents.Patch(ctx, i.content, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil:
			klog.V(4).InfoS("Recorded this process on the VolumeSnapshotContent before asking EC2 for its snapshot",
				"content", i.content, "process", l.process, "before", before)
			return before != "", nil
		case apierrors.IsConflict(err) && attempt < conflictAttempts:
			continue
		default:
			return false, fmt.Errorf("annotate VolumeSnapshotContent %s with %s: %w", i.content, l.key, err)
		}
	}
}
