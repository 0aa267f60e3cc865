// Package inflight tracks the operations a plugin is running right now, so a
// concurrent duplicate of a CSI request can be answered Aborted at once
// instead of racing the first one into a second cloud resource or a second
// mkfs. Kubernetes sidecars retry an Aborted request with backoff and then
// see the finished result, which keeps every RPC idempotent.
//
// Each CSI service keeps its own Set, so a controller operation never blocks
// a node operation on the same volume in an all-in-one process. Keys are
// typed by what they name (a volume ID, a volume name, a volume/node pair, a
// snapshot), so two kinds of key can never collide however their strings
// look.
package inflight

import (
	"fmt"
	"sync"

	"k8s.io/klog/v2"
)

// kind says what a Key names.
type kind uint8

const (
	kindVolume kind = iota + 1
	kindVolumeName
	kindAttachment
	kindSnapshot
	kindSnapshotName
)

// Key names one operation's subject. Build it with Volume, VolumeName,
// Attachment, Snapshot or SnapshotName; the zero Key names nothing.
type Key struct {
	kind kind
	id   string
	node string // only for attachments
}

// Volume keys operations on an existing volume by its ID: DeleteVolume,
// ControllerExpandVolume, ControllerModifyVolume and the node RPCs.
func Volume(volumeID string) Key { return Key{kind: kindVolume, id: volumeID} }

// VolumeName keys CreateVolume by the name Kubernetes gave the volume, since
// no ID exists yet.
func VolumeName(name string) Key { return Key{kind: kindVolumeName, id: name} }

// Attachment keys ControllerPublishVolume and ControllerUnpublishVolume by
// the volume/node pair, so attaching one volume to two nodes (multi-attach)
// can proceed in parallel while a duplicate for the same pair cannot.
func Attachment(volumeID, nodeID string) Key {
	return Key{kind: kindAttachment, id: volumeID, node: nodeID}
}

// Snapshot keys DeleteSnapshot by the snapshot ID.
func Snapshot(snapshotID string) Key { return Key{kind: kindSnapshot, id: snapshotID} }

// SnapshotName keys CreateSnapshot by the name Kubernetes gave the snapshot.
func SnapshotName(name string) Key { return Key{kind: kindSnapshotName, id: name} }

// String describes the key in a user's terms, for Aborted messages and logs.
func (k Key) String() string {
	switch k.kind {
	case kindVolume:
		return fmt.Sprintf("volume %s", k.id)
	case kindVolumeName:
		return fmt.Sprintf("volume named %q", k.id)
	case kindAttachment:
		return fmt.Sprintf("volume %s on node %s", k.id, k.node)
	case kindSnapshot:
		return fmt.Sprintf("snapshot %s", k.id)
	case kindSnapshotName:
		return fmt.Sprintf("snapshot named %q", k.id)
	default:
		return "nothing"
	}
}

// Set holds the keys of operations in progress. The zero Set is empty and
// ready to use; it is safe for concurrent use and must not be copied.
type Set struct {
	mu   sync.Mutex
	held map[Key]struct{}
}

// TryAcquire marks key as in progress and returns the function that ends
// it, or ok=false when an operation with that key is already running. The
// caller must call release when its operation ends, however it ends (defer
// it); calling release more than once is harmless and never releases a later
// holder's claim.
func (s *Set) TryAcquire(key Key) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.held[key]; busy {
		klog.V(4).InfoS("Operation already in progress", "key", key)
		return nil, false
	}
	if s.held == nil {
		s.held = make(map[Key]struct{})
	}
	s.held[key] = struct{}{}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.held, key)
			s.mu.Unlock()
		})
	}, true
}
