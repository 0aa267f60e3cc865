package cloud

import (
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// volumeWatches lets every wait for a volume's state change see what any
// DescribeVolumes call by ID sees of its volume. Each such call also asks
// for the volumes watched (see extras), and hands each watch what it
// found: a wait whose look falls due soon after another's call takes that
// call's answer instead of making its own, so that waits falling due apart
// (EC2's times vary, requests leave at their own moments) still share
// their calls. The zero value is ready for use, and it is safe for
// concurrent use.
type volumeWatches struct {
	mu   sync.Mutex
	byID map[string][]*volumeWatch
}

// volumeWatch is one wait's subscription to the reads of its volume.
type volumeWatch struct {
	id string
	// since is when the watch began: an answer to a call sent before may
	// show the volume as it was before the request the wait follows (an
	// earlier attachment still attached), and is not handed over.
	since time.Time
	// visible is set while other calls may ask for the volume too: from the
	// start, and again once a read found it when asking for it made a call
	// fail (EC2 fails a whole DescribeVolumes by ID for one volume it does
	// not show: one deleted meanwhile, or, right after CreateVolume, one its
	// reads do not show yet). Guarded by volumeWatches.mu.
	visible bool
	// seen holds the latest read not yet taken by the wait.
	seen chan seenVolume
}

// seenVolume is what one DescribeVolumes call showed of a volume, and when
// its answer came.
type seenVolume struct {
	volume types.Volume
	at     time.Time
}

// watch starts a watch of a volume; the wait ends it with unwatch.
func (ws *volumeWatches) watch(volumeID string) *volumeWatch {
	w := &volumeWatch{id: volumeID, since: time.Now(), visible: true, seen: make(chan seenVolume, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byID == nil {
		ws.byID = map[string][]*volumeWatch{}
	}
	ws.byID[volumeID] = append(ws.byID[volumeID], w)
	return w
}

// unwatch ends a watch.
func (ws *volumeWatches) unwatch(w *volumeWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	rest := slices.DeleteFunc(ws.byID[w.id], func(x *volumeWatch) bool { return x == w })
	if len(rest) == 0 {
		delete(ws.byID, w.id)
		return
	}
	ws.byID[w.id] = rest
}

// extras returns up to limit watched volumes that are visible (see
// volumeWatch) and that ids does not name, for a call by ids to ask about
// too.
func (ws *volumeWatches) extras(ids []string, limit int) []string {
	if limit <= 0 {
		return nil
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var out []string
	for id, watches := range ws.byID {
		if len(out) == limit {
			break
		}
		if slices.ContainsFunc(watches, func(w *volumeWatch) bool { return w.visible }) && !slices.Contains(ids, id) {
			out = append(out, id)
		}
	}
	return out
}

// hide marks the watches of ids as not visible until a read finds their
// volume: asking for one of them failed a call.
func (ws *volumeWatches) hide(ids []string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, id := range ids {
		for _, w := range ws.byID[id] {
			w.visible = false
		}
	}
}

// deliver hands what a call sent at asked and answered at at showed of
// each volume to that volume's watches begun before asked. A watch keeps
// only the latest read its wait has not taken.
func (ws *volumeWatches) deliver(volumes []types.Volume, asked, at time.Time) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, v := range volumes {
		for _, w := range ws.byID[aws.ToString(v.VolumeId)] {
			w.visible = true
			if asked.Before(w.since) {
				continue
			}
			select {
			case <-w.seen:
			default:
			}
			w.seen <- seenVolume{volume: v, at: at}
		}
	}
}
