package disks

import (
	"slices"
	"sync"
)

// keyedMutex serializes work per volume or snapshot ID while letting work on
// different IDs run in parallel. Entries exist only while someone holds or
// waits for them, so thousands of IDs cost nothing at rest.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*refMutex
}

type refMutex struct {
	sync.Mutex
	refs int
}

// lock takes the locks of all keys, in sorted order so two callers that need
// the same pair can never deadlock, and returns the function that releases
// them. Duplicate keys are taken once.
func (k *keyedMutex) lock(keys ...string) (unlock func()) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	held := make([]*refMutex, 0, len(keys))
	for _, key := range keys {
		k.mu.Lock()
		if k.locks == nil {
			k.locks = map[string]*refMutex{}
		}
		m, ok := k.locks[key]
		if !ok {
			m = &refMutex{}
			k.locks[key] = m
		}
		m.refs++
		k.mu.Unlock()
		m.Lock()
		held = append(held, m)
	}
	return func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i].Unlock()
			k.mu.Lock()
			held[i].refs--
			if held[i].refs == 0 {
				delete(k.locks, keys[i])
			}
			k.mu.Unlock()
		}
	}
}
