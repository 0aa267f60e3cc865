//go:build chaos

package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/diskplane/diskplane/pkg/emulator/ec2api"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// audit is what the emulator holds after the run, set against what the
// controller answered.
type audit struct {
	// leakedVolumes and leakedSnapshots exist in EC2 but map to no request
	// that succeeded and left them: never returned by a CreateVolume or
	// CreateSnapshot, or returned and deleted by a DeleteVolume or
	// DeleteSnapshot that succeeded.
	leakedVolumes, leakedSnapshots []string
	// kept are resources of lifecycles that ended early: returned by a
	// create whose delete never ran.
	kept []string
	// shared are the volumes EC2 saw attached to two instances at once.
	shared []string
	// incomplete are the lifecycle steps that never succeeded, and stuck
	// the resources EC2 still shows in a state that should have ended.
	incomplete, stuck []string
	// requests counts every EC2 request, by action and outcome.
	requests, byAction map[string]int
	total              int
}

// take audits the emulator against the lifecycles' results. Volumes and
// snapshots being deleted count as deleted.
func take(env *emulatortest.Env, results []result) audit {
	a := audit{requests: map[string]int{}, byAction: map[string]int{}}
	volumes, snapshots := map[string]result{}, map[string]result{}
	for _, r := range results {
		if r.volumeID != "" {
			volumes[r.volumeID] = r
		}
		if r.snapshotID != "" {
			snapshots[r.snapshotID] = r
		}
		if r.incomplete != "" {
			a.incomplete = append(a.incomplete, r.incomplete)
		}
	}
	// account sorts what EC2 holds: kept when a create returned it and no
	// delete of it succeeded, leaked otherwise.
	account := func(leaked *[]string, returned, deleted bool, id, name string, state any) {
		if returned && !deleted {
			a.kept = append(a.kept, id)
			return
		}
		*leaked = append(*leaked, fmt.Sprintf("%s (%s, %s)", id, name, state))
	}
	cloud := env.Cloud()
	for _, v := range cloud.Volumes() {
		if v.Root || v.State == model.VolumeDeleting {
			continue
		}
		r, returned := volumes[v.ID]
		account(&a.leakedVolumes, returned, r.volumeDeleted, v.ID, v.Tags["CSIVolumeName"], v.State)
		if v.State == model.VolumeCreating {
			a.stuck = append(a.stuck, v.ID+" creating")
		}
		for _, at := range v.Attachments {
			if at.State == model.AttachmentAttaching || at.State == model.AttachmentDetaching {
				a.stuck = append(a.stuck, fmt.Sprintf("%s %s %s", v.ID, at.State, at.InstanceID))
			}
		}
	}
	for _, s := range cloud.Snapshots() {
		r, returned := snapshots[s.ID]
		account(&a.leakedSnapshots, returned, r.snapshotDeleted, s.ID, s.Tags["CSIVolumeSnapshotName"], s.State)
		if s.State == model.SnapshotPending {
			a.stuck = append(a.stuck, s.ID+" pending")
		}
	}
	for id := range cloud.Audit().SharedVolumes {
		a.shared = append(a.shared, id)
	}
	metrics := env.Emulator().Metrics
	for _, action := range ec2api.Actions() {
		n := metrics.Count(action, "")
		if n == 0 {
			continue
		}
		a.byAction[action] = n
		a.total += n
		for _, code := range []string{"Success", "RequestLimitExceeded", "InternalError", "Unavailable", "Reset", "Stall", "IdempotentParameterMismatch"} {
			if c := metrics.Count(action, code); c > 0 {
				a.requests[code] += c
			}
		}
	}
	sort.Strings(a.leakedVolumes)
	sort.Strings(a.leakedSnapshots)
	sort.Strings(a.shared)
	return a
}

// failures lists what the audit must not find.
func (a audit) failures() []string {
	var out []string
	add := func(what string, items []string) {
		if len(items) > 0 {
			out = append(out, fmt.Sprintf("%d %s: %s", len(items), what, strings.Join(items, "; ")))
		}
	}
	add("leaked volumes", a.leakedVolumes)
	add("leaked snapshots", a.leakedSnapshots)
	add("volumes attached to two instances at once", a.shared)
	add("lifecycle steps that never completed", a.incomplete)
	add("resources stuck in a transitional state", a.stuck)
	return out
}

// summary renders the figures of the run.
func (a audit) summary(lifecycles int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "leaked volumes: %d, leaked snapshots: %d, volumes attached twice: %d, requests that never completed: %d (steps %d, stuck resources %d)\n",
		len(a.leakedVolumes), len(a.leakedSnapshots), len(a.shared), len(a.incomplete)+len(a.stuck), len(a.incomplete), len(a.stuck))
	fmt.Fprintf(&b, "volumes and snapshots left by lifecycles that ended early: %d\n", len(a.kept))
	fmt.Fprintf(&b, "EC2 requests: %d, %.1f per lifecycle; by outcome:", a.total, float64(a.total)/float64(max(lifecycles, 1)))
	for _, code := range sortedKeys(a.requests) {
		fmt.Fprintf(&b, " %s %d", code, a.requests[code])
	}
	b.WriteString("\nEC2 requests per lifecycle by action:")
	for _, action := range sortedKeys(a.byAction) {
		fmt.Fprintf(&b, " %s %.1f", action, float64(a.byAction[action])/float64(max(lifecycles, 1)))
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
