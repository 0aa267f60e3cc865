package cloud

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

// fakeIntent is a SnapshotIntent answering as the test says, counting the
// records.
type fakeIntent struct {
	othersBefore bool
	err          error
	records      int
}

func (f *fakeIntent) Record(context.Context) (bool, error) {
	f.records++
	return f.othersBefore, f.err
}

// TestCreateSnapshotIntent: a process right after its start, with EC2's
// visibility window far longer than the call's deadline. Without an
// intent record, or when one says another process recorded itself first,
// a lookup that finds nothing proves nothing and no snapshot is made
// before the window has passed; when the record says no process did, the
// snapshot is made at once. A record that fails sends nothing.
func TestCreateSnapshotIntent(t *testing.T) {
	t.Parallel()
	errAPI := errors.New("the API server is away")
	for _, tc := range []struct {
		name string
		// intent is nil for a call without one.
		intent *fakeIntent
		// predecessor makes a snapshot carrying the name first, as a
		// previous process's request did.
		predecessor bool
		wantErr     error
		// wantNamed is how many snapshots carry the name afterwards.
		wantNamed int
	}{
		{name: "no record waits for predecessors", wantErr: ErrRetryLater},
		{name: "no process before sends at once", intent: &fakeIntent{}, wantNamed: 1},
		{name: "another process before waits", intent: &fakeIntent{othersBefore: true}, wantErr: ErrRetryLater},
		{name: "another process's snapshot found", intent: &fakeIntent{othersBefore: true}, predecessor: true, wantNamed: 1},
		{name: "record failed sends nothing", intent: &fakeIntent{err: errAPI}, wantErr: errAPI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startBackend(t, emulatortest.Options{})
			cfg := testConfig()
			cfg.VisibilityTimeout = time.Hour
			setup := newCloud(t, b, testConfig())
			vol := mustCreate(t, setup, "pvc-intent", &CreateVolumeOptions{SizeGiB: 1, Zone: b.Zone()})
			const name = "snapshot-intent"
			var made string
			if tc.predecessor {
				out, err := rawClient(b).CreateSnapshot(testContext(t), &ec2.CreateSnapshotInput{VolumeId: aws.String(vol.ID),
					TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSnapshot,
						Tags: []types.Tag{{Key: aws.String(TagSnapshotName), Value: aws.String(name)}}}}})
				if err != nil {
					t.Fatal(err)
				}
				made = aws.ToString(out.SnapshotId)
			}

			c := newCloud(t, b, cfg) // the process that just started
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			opts := &CreateSnapshotOptions{}
			if tc.intent != nil {
				opts.Intent = tc.intent
			}
			snap, err := c.CreateSnapshot(ctx, name, vol.ID, opts)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !errors.Is(err, ErrRetryLater) {
					t.Fatalf("CreateSnapshot: %v, want an error wrapping %v and ErrRetryLater", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("CreateSnapshot: %v", err)
			}
			if tc.intent != nil && tc.intent.records != 1 {
				t.Errorf("the intent was recorded %d times, want once, before anything was sent", tc.intent.records)
			}
			if made != "" && (snap == nil || snap.ID != made) {
				t.Errorf("CreateSnapshot answered %+v, want the predecessor's %s", snap, made)
			}
			named, err := setup.snapshotsNamed(testContext(t), name)
			if err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
			if len(named) != tc.wantNamed {
				t.Errorf("%d snapshots carry the name, want %d", len(named), tc.wantNamed)
			}
		})
	}
}
