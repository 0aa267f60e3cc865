// Package model is the EC2 emulator's cloud: zones, instance types,
// instances, volumes, attachments, snapshots, modifications and tags, with
// EC2's validation rules and error codes, time-driven state changes and
// crash-safe persistence. It knows nothing of HTTP; the ec2api package turns
// EC2 Query requests into calls of this package.
//
// The bytes behind volumes live in a disks.Store. Attaching a volume to the
// local instance (the instance this host plays) asks the store for a block
// device; every other instance is state only.
//
// One mutex guards the whole cloud. State changes that take time in EC2
// (creating, attaching, detaching, snapshot progress, modifications) carry a
// due time; they are applied lazily at the start of every call and by a
// background loop, so their effects on the host (a loop device appearing)
// happen even when no client is asking.
package model

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// retryInterval is how often the background loop retries a host-side step
// that could not complete yet, such as detaching a busy device.
const retryInterval = 250 * time.Millisecond

// Cloud is one emulated EC2 region. All methods are safe for concurrent use.
type Cloud struct {
	cfg     Config
	persist *persister
	// latency draws how long each state change takes.
	latency *latencyDraws

	mu sync.Mutex
	st *state
	// quotas are the account quotas in force (every one spelled out).
	quotas Quotas
	// dirty is set by every change of st and cleared when the change gets a
	// generation number.
	dirty bool
	// generation counts the changed states; the persister writes the newest.
	generation uint64
	// tokensPruned is when expired ClientTokens were last forgotten.
	tokensPruned time.Time
	// past holds recent states for stale reads (see history.go).
	past history
	// audit records what the cloud saw happen, for tests (see Audit).
	audit Audit

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// New builds the cloud: it loads the saved state from cfg.DataDir (if any),
// declares the configured instances, reconciles the disk store with the
// volumes attached to the local instance, saves the state, removes the
// images a crash left that the saved state does not name (see
// removeUnknownImages; a new state keeps the images it finds instead, see
// keepImagesFound) and starts the background loop. Close stops it.
func New(cfg Config) (*Cloud, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cloud{
		cfg:     cfg,
		latency: newLatencyDraws(cfg.Latencies, cfg.LatencySeed),
		quotas:  cfg.Quotas,
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if cfg.DataDir != "" {
		c.persist = newPersister(cfg.DataDir, c.snapshotState)
	}
	st, stateFromFile, err := c.load()
	if err != nil {
		return nil, err
	}
	c.st = st
	if err := c.declareInstances(); err != nil {
		return nil, err
	}
	if err := c.reconcileHost(); err != nil {
		return nil, err
	}
	if !stateFromFile {
		c.keepImagesFound()
	}
	c.dirty = true
	if err := c.save(); err != nil {
		return nil, err
	}
	if stateFromFile {
		c.removeUnknownImages()
	}
	go c.loop()
	klog.V(2).InfoS("Emulated cloud ready", "region", cfg.Region, "instances", len(c.st.Instances),
		"volumes", len(c.st.Volumes), "snapshots", len(c.st.Snapshots), "dataDir", cfg.DataDir)
	return c, nil
}

// reconcileHost brings the host's devices in line with the state: the disk
// store makes the devices of volumes attached to the instances the host
// plays and removes any other it made, and each view exposes its instance's
// devices and withdraws any other. Device names can differ after a restart (the
// kernel hands out free loop devices), so the attachments learn theirs
// again.
func (c *Cloud) reconcileHost() error {
	ids := c.hostAttachedVolumes()
	if err := c.cfg.Store.Reconcile(ids); err != nil {
		return fmt.Errorf("reconcile disk store: %w", err)
	}
	for _, id := range ids {
		v := c.st.Volumes[id]
		for _, a := range v.Attachments {
			if !c.onHost(v, a) || a.State != AttachmentAttached {
				continue
			}
			dev, err := c.cfg.Store.Attach(id)
			if err != nil {
				return fmt.Errorf("reconcile disk store: device of %s: %w", id, err)
			}
			a.HostDevice = dev
		}
	}
	var errs []error
	for id, attached := range c.viewedAttachments() {
		if err := c.st.Instances[id].View.Reconcile(attached); err != nil {
			errs = append(errs, fmt.Errorf("reconcile the view of %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// Close stops the background loop. The state is already saved: every call
// saves before it returns.
func (c *Cloud) Close() error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	return nil
}

// Region is the region the cloud plays.
func (c *Cloud) Region() string { return c.cfg.Region }

// AccountID is the account that owns every resource.
func (c *Cloud) AccountID() string { return c.cfg.AccountID }

// Zones lists the region's zones.
func (c *Cloud) Zones() []Zone { return append([]Zone(nil), c.cfg.Zones...) }

// Now is the cloud's clock.
func (c *Cloud) Now() time.Time { return c.cfg.Now() }

// do runs fn under the lock after applying every state change that is due,
// then waits until the state as fn left it is on disk, and wakes the
// background loop to reconsider its next due time if anything changed. So a
// client never acts on something a crash could still take back: not on its
// own change, nor on another client's change it has seen.
func (c *Cloud) do(fn func(now time.Time) error) error {
	c.mu.Lock()
	now := c.cfg.Now()
	c.recordLocked(now)
	c.advance(now)
	err := fn(now)
	c.recordLocked(now)
	changed := c.dirty
	want := c.nextGenerationLocked()
	c.mu.Unlock()
	saveErr := c.flush(want)
	if changed {
		c.wake()
	}
	if saveErr != nil {
		klog.ErrorS(saveErr, "Saving the emulator state failed")
		return errors.Join(err, saveErr)
	}
	return err
}

// save writes the state now (used at start-up).
func (c *Cloud) save() error {
	c.mu.Lock()
	want := c.nextGenerationLocked()
	c.mu.Unlock()
	return c.flush(want)
}

// nextGenerationLocked numbers a changed state and returns the generation
// that must be on disk for the caller's view to be durable.
func (c *Cloud) nextGenerationLocked() uint64 {
	if c.dirty {
		c.generation++
		c.dirty = false
	}
	return c.generation
}

// flush waits until generation want of the state is on disk.
func (c *Cloud) flush(want uint64) error {
	if c.persist == nil {
		return nil
	}
	return c.persist.flush(want)
}

// snapshotState serializes the current state and its generation for the
// persister.
func (c *Cloud) snapshotState() ([]byte, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	data, err := c.st.marshal()
	return data, c.generation, err
}

// wake nudges the background loop to recompute its next due time.
func (c *Cloud) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// loop applies due state changes when they fall due, so host-side effects
// (a device appearing on attach) do not wait for the next API call.
func (c *Cloud) loop() {
	defer close(c.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		wait, pending := c.nextWakeLocked(c.cfg.Now())
		c.mu.Unlock()
		if !pending {
			wait = time.Hour
		}
		timer.Reset(max(wait, 0))
		select {
		case <-c.stop:
			return
		case <-c.kick:
		case <-timer.C:
		}
		if err := c.do(func(time.Time) error { return nil }); err != nil {
			klog.ErrorS(err, "Background state update failed")
		}
	}
}

// markDirty records that the state changed and must be saved.
func (c *Cloud) markDirty() { c.dirty = true }
