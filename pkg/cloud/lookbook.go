package cloud

import (
	"sync"
	"time"
)

// lookBookKeep is how far past a tick its bookings are kept: long after
// every wait booked on it has woken and counted it.
const lookBookKeep = 10 * time.Second

// lookBook counts, per grid tick, the waits that mean to look then, so that
// a wait alone on its tick can look one tick later with the waits booked
// there, in their batched call, instead of in a call of its own. When of
// waits sent together one sees its change a tick before the others (its
// request left a millisecond before the moment that puts the change on the
// earlier tick, or its change finished a millisecond before a look they
// shared), every request that follows it leaves a tick before theirs: the
// group stays split, and each of its later waits costs two calls unless the
// one ahead joins the others' tick. The zero value is ready for use, and it
// is safe for concurrent use.
type lookBook struct {
	mu     sync.Mutex
	booked map[int64]int // wall-clock nanoseconds of a tick → waits booked on it
}

// book records a wait that means to look at t.
func (b *lookBook) book(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.booked == nil {
		b.booked = map[int64]int{}
	}
	b.booked[t.UnixNano()]++
	b.forgetOld(t)
}

// cancel takes back a booking for t by a wait that will not look then.
func (b *lookBook) cancel(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := t.UnixNano()
	if b.booked[k]--; b.booked[k] <= 0 {
		delete(b.booked, k)
	}
}

// joinLater is asked by a wait that booked t, when t has come: when no other
// wait is booked on t and some are on later, it moves its booking there and
// returns true, and the wait is to look at later. Bookings are not taken
// back once their tick has come, so that every wait woken on a tick counts
// all the others of that tick, whichever wakes first.
func (b *lookBook) joinLater(t, later time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, l := t.UnixNano(), later.UnixNano()
	if b.booked[k] != 1 || b.booked[l] == 0 {
		return false
	}
	delete(b.booked, k)
	b.booked[l]++
	return true
}

// forgetOld drops the bookings of ticks lookBookKeep before now, once there
// are enough of them to be worth a walk over the map.
func (b *lookBook) forgetOld(now time.Time) {
	if len(b.booked) < 64 {
		return
	}
	oldest := now.Add(-lookBookKeep).UnixNano()
	for k := range b.booked {
		if k < oldest {
			delete(b.booked, k)
		}
	}
}
