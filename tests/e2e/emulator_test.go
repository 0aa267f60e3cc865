//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// emulator is a client of the EC2 emulator's admin API: the cloud's view of
// volumes and snapshots (what EC2 really holds, never hidden by a fault),
// and its faults.
type emulator struct {
	url string
}

var adminHTTP = &http.Client{Timeout: 10 * time.Second}

// call sends one admin API request (body may be nil) and decodes a 200
// answer into into, unless into is nil.
func (e *emulator) call(ctx context.Context, method, path string, body io.Reader, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, body)
	if err != nil {
		return err
	}
	resp, err := adminHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, answer)
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(answer, into)
}

// volumes lists every EC2 volume, the instances' root volumes included.
func (e *emulator) volumes(ctx context.Context) ([]model.Volume, error) {
	var vols []model.Volume
	return vols, e.call(ctx, http.MethodGet, admin.PathVolumes, nil, &vols)
}

// snapshots lists every EC2 snapshot.
func (e *emulator) snapshots(ctx context.Context) ([]model.Snapshot, error) {
	var snaps []model.Snapshot
	return snaps, e.call(ctx, http.MethodGet, admin.PathSnapshots, nil, &snaps)
}

// resourceIDs lists the IDs of every volume and snapshot.
func (e *emulator) resourceIDs(ctx context.Context) ([]string, error) {
	vols, err := e.volumes(ctx)
	if err != nil {
		return nil, err
	}
	snaps, err := e.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, v := range vols {
		ids = append(ids, v.ID)
	}
	for _, s := range snaps {
		ids = append(ids, s.ID)
	}
	return ids, nil
}

// volume returns the EC2 volume with this ID, failing the test when the
// emulator does not have it.
func (e *emulator) volume(t *testing.T, id string) model.Volume {
	t.Helper()
	vols, err := e.volumes(t.Context())
	if err != nil {
		t.Fatalf("list the emulator's volumes: %v", err)
	}
	for _, v := range vols {
		if v.ID == id {
			return v
		}
	}
	t.Fatalf("the emulator has no volume %s", id)
	return model.Volume{}
}

// volumesTagged returns the volumes whose tag key has the value.
func (e *emulator) volumesTagged(ctx context.Context, key, value string) ([]model.Volume, error) {
	vols, err := e.volumes(ctx)
	if err != nil {
		return nil, err
	}
	var out []model.Volume
	for _, v := range vols {
		if v.Tags[key] == value {
			out = append(out, v)
		}
	}
	return out, nil
}

// patchFaults changes the fault settings the JSON document names (see
// docs/emulator.md, "Faults") and keeps the others.
func (e *emulator) patchFaults(ctx context.Context, doc string) error {
	if err := e.call(ctx, http.MethodPatch, admin.PathFaults, strings.NewReader(doc), nil); err != nil {
		return fmt.Errorf("faults %s: %w", doc, err)
	}
	return nil
}

// setHealth sets what DescribeVolumeStatus reports about a volume (a
// model.VolumeHealth document; {} is healthy).
func (e *emulator) setHealth(ctx context.Context, id, doc string) error {
	if err := e.call(ctx, http.MethodPut, admin.PathVolumes+"/"+id+"/health", strings.NewReader(doc), nil); err != nil {
		return fmt.Errorf("health of %s: %w", id, err)
	}
	return nil
}

// failIO makes the volume's device fail every write, or heals it.
func (e *emulator) failIO(ctx context.Context, id string, fail bool) error {
	doc := fmt.Sprintf(`{"failIO":%t}`, fail)
	if err := e.call(ctx, http.MethodPut, admin.PathVolumes+"/"+id+"/device", strings.NewReader(doc), nil); err != nil {
		return fmt.Errorf("device of %s: %w", id, err)
	}
	return nil
}
