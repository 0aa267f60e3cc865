package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/identityadmin"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// Client is a Go client of the admin API, for tests and tools that drive an
// emulator running as a process: the cloud's view of its volumes and
// snapshots (what EC2 really holds, never hidden by a fault), its faults,
// its audit, and the IAM and KMS declarations behind its STS and KMS.
type Client struct {
	// URL is the admin listener, e.g. http://127.0.0.1:8702.
	URL string
	// HTTP is the client used; nil means one with a 10 s timeout.
	HTTP *http.Client
}

var defaultHTTP = &http.Client{Timeout: 10 * time.Second}

// Volumes lists every volume, the instances' root volumes included.
func (c *Client) Volumes(ctx context.Context) ([]model.Volume, error) {
	var vols []model.Volume
	return vols, c.do(ctx, http.MethodGet, PathVolumes, nil, &vols)
}

// Snapshots lists every snapshot.
func (c *Client) Snapshots(ctx context.Context) ([]model.Snapshot, error) {
	var snaps []model.Snapshot
	return snaps, c.do(ctx, http.MethodGet, PathSnapshots, nil, &snaps)
}

// Audit returns what the cloud saw since it started (GET /audit).
func (c *Client) Audit(ctx context.Context) (model.Audit, error) {
	var a model.Audit
	return a, c.do(ctx, http.MethodGet, PathAudit, nil, &a)
}

// Transitions returns the times the cloud's recent state changes were
// given, oldest first (GET /transitions).
func (c *Client) Transitions(ctx context.Context) ([]model.Draw, error) {
	var ds []model.Draw
	return ds, c.do(ctx, http.MethodGet, PathTransitions, nil, &ds)
}

// Faults returns the fault setting in force.
func (c *Client) Faults(ctx context.Context) (faults.Config, error) {
	var f faults.Config
	return f, c.do(ctx, http.MethodGet, PathFaults, nil, &f)
}

// SetFaults replaces the whole fault setting.
func (c *Client) SetFaults(ctx context.Context, f faults.Config) error {
	return c.putJSON(ctx, PathFaults, f)
}

// PatchFaults changes the fault settings the JSON document names (see
// docs/emulator.md, "Faults") and keeps the others.
func (c *Client) PatchFaults(ctx context.Context, doc string) error {
	if err := c.do(ctx, http.MethodPatch, PathFaults, strings.NewReader(doc), nil); err != nil {
		return fmt.Errorf("faults %s: %w", doc, err)
	}
	return nil
}

// SetVolumeHealth replaces what DescribeVolumeStatus reports about a
// volume with a model.VolumeHealth JSON document ({} is healthy), so a
// test can watch the driver report an impaired volume.
func (c *Client) SetVolumeHealth(ctx context.Context, id, doc string) error {
	if err := c.do(ctx, http.MethodPut, PathVolumes+"/"+id+"/health", strings.NewReader(doc), nil); err != nil {
		return fmt.Errorf("health of %s: %w", id, err)
	}
	return nil
}

// FailVolumeIO makes every write to the volume's device on the emulator's
// host fail (true), or heals it (false): the node's kernel, not only EC2,
// then sees a failing disk.
func (c *Client) FailVolumeIO(ctx context.Context, id string, fail bool) error {
	doc := fmt.Sprintf(`{"failIO":%t}`, fail)
	if err := c.do(ctx, http.MethodPut, PathVolumes+"/"+id+"/device", strings.NewReader(doc), nil); err != nil {
		return fmt.Errorf("device of %s: %w", id, err)
	}
	return nil
}

// SetInstanceState stops or starts an instance (model.SetInstanceState):
// tests stop the instance of a node they killed, as its machine is gone.
func (c *Client) SetInstanceState(ctx context.Context, id string, state model.InstanceState) error {
	if err := c.putJSON(ctx, PathInstances+"/"+id+"/state", InstanceStateDoc{State: state}); err != nil {
		return fmt.Errorf("state of %s: %w", id, err)
	}
	return nil
}

// SetInstanceImpaired makes a running instance's guest hang (true) or
// answer again (false) (model.SetInstanceImpaired): tests hang a node
// whose instance keeps running.
func (c *Client) SetInstanceImpaired(ctx context.Context, id string, impaired bool) error {
	if err := c.putJSON(ctx, PathInstances+"/"+id+"/status", InstanceStatusDoc{Impaired: impaired}); err != nil {
		return fmt.Errorf("status of %s: %w", id, err)
	}
	return nil
}

// SetIAM replaces the emulator's IAM document (OIDC providers, roles,
// access keys): an iam.Config or anything that marshals to its JSON form.
// Tests declare a cluster's service-account issuer with it, and revoke a
// role's trust while a driver runs.
func (c *Client) SetIAM(ctx context.Context, doc any) error {
	return c.putJSON(ctx, identityadmin.IAMPath, doc)
}

// SetKMSKey declares the KMS key with this ID, or changes its aliases,
// description, enabled state and key policy: a kms.KeySpec or anything
// that marshals to its JSON form, replacing what was declared. Tests revoke a role's kms:Decrypt with
// it while a volume is in use.
func (c *Client) SetKMSKey(ctx context.Context, id string, doc any) error {
	return c.putJSON(ctx, identityadmin.KMSKeysPath+"/"+id, doc)
}

// putJSON PUTs doc, JSON-encoded, to path.
func (c *Client) putJSON(ctx context.Context, path string, doc any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("PUT %s: %w", path, err)
	}
	return c.do(ctx, http.MethodPut, path, bytes.NewReader(b), nil)
}

// do sends one request (body may be nil) and decodes a 200 answer into
// into, unless into is nil.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, body)
	if err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
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
