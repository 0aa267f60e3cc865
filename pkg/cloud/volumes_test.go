package cloud

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	emukms "github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestCreateVolume(t *testing.T) {
	t.Parallel()
	c, env := start(t, emulatortest.Options{KMS: emukms.Config{Keys: []emukms.KeySpec{{ID: "test", Aliases: []string{"alias/test"}}}}})
	zone, otherZone := env.Zone(), describedZones(t, env)[1]
	snapSource := mustCreate(t, c, "snap-source", &CreateVolumeOptions{SizeGiB: 3, Zone: zone})
	snap, err := c.CreateSnapshot(testContext(t), "snap", snapSource.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitForSnapshot(testContext(t), snap.ID); err != nil {
		t.Fatal(err)
	}
	cloneSource := mustCreate(t, c, "clone-source", &CreateVolumeOptions{SizeGiB: 4, Zone: zone})

	tests := []struct {
		name  string
		opts  CreateVolumeOptions
		check func(t *testing.T, v *Volume)
		err   error
		// motoLacks, when set, is what moto does not do that the case needs.
		motoLacks string
	}{
		{"defaults to gp3 in some zone", CreateVolumeOptions{SizeGiB: 1}, func(t *testing.T, v *Volume) {
			if v.Type != VolumeTypeGP3 || v.Zone == "" || v.SizeGiB != 1 {
				t.Errorf("got %+v", v)
			}
		}, nil, ""},
		{"zone, type, IOPS, throughput and tags", CreateVolumeOptions{SizeGiB: 10, Zone: zone, Type: VolumeTypeGP3, IOPS: 4000, Throughput: 250, Tags: map[string]string{"team": "a"}},
			func(t *testing.T, v *Volume) {
				if v.Zone != zone || v.IOPS != 4000 || v.Throughput != 250 || v.Tags["team"] != "a" || v.Tags[TagVolumeName] == "" {
					t.Errorf("got %+v", v)
				}
			}, nil, ""},
		{"IOPS per GiB", CreateVolumeOptions{SizeGiB: 100, Zone: zone, Type: VolumeTypeIO2, IOPSPerGiB: 50}, func(t *testing.T, v *Volume) {
			if v.IOPS != 5000 {
				t.Errorf("IOPS %d, want 5000", v.IOPS)
			}
		}, nil, ""},
		{"IOPS per GiB raised to the minimum", CreateVolumeOptions{SizeGiB: 10, Zone: zone, IOPSPerGiB: 10, AllowIOPSPerGiBIncrease: true}, func(t *testing.T, v *Volume) {
			if v.IOPS != 3000 {
				t.Errorf("IOPS %d, want 3000", v.IOPS)
			}
		}, nil, ""},
		{"zone ID", CreateVolumeOptions{SizeGiB: 1, ZoneID: otherZone.ID}, func(t *testing.T, v *Volume) {
			if v.Zone != otherZone.Name {
				t.Errorf("zone %s, want %s", v.Zone, otherZone.Name)
			}
		}, nil, "ignores CreateVolume's AvailabilityZoneId: the volume has no zone"},
		{"encrypted with a key", CreateVolumeOptions{SizeGiB: 1, Zone: zone, KMSKeyID: "alias/test"}, func(t *testing.T, v *Volume) {
			if !v.Encrypted || v.KMSKeyID == "" {
				t.Errorf("got %+v", v)
			}
		}, nil, ""},
		{"from a snapshot", CreateVolumeOptions{Zone: zone, SnapshotID: snap.ID}, func(t *testing.T, v *Volume) {
			if v.SnapshotID != snap.ID || v.SizeGiB != 3 {
				t.Errorf("got %+v", v)
			}
		}, nil, ""},
		{"a clone", CreateVolumeOptions{SizeGiB: 5, SourceVolumeID: cloneSource.ID}, func(t *testing.T, v *Volume) {
			if v.SourceVolumeID != cloneSource.ID || v.Zone != cloneSource.Zone || v.SizeGiB != 5 || v.Type != VolumeTypeGP3 {
				t.Errorf("got %+v", v)
			}
		}, nil, motoLacksCopyVolumes},
		{"multi-attach io2", CreateVolumeOptions{SizeGiB: 10, Zone: zone, Type: VolumeTypeIO2, IOPS: 1000, MultiAttach: true}, func(t *testing.T, v *Volume) {
			if !v.MultiAttach {
				t.Errorf("got %+v", v)
			}
		}, nil, ""},
		{"no size", CreateVolumeOptions{Zone: zone}, nil, ErrInvalidArgument, ""},
		{"zone and zone ID", CreateVolumeOptions{SizeGiB: 1, Zone: zone, ZoneID: "use1-az1"}, nil, ErrInvalidArgument, ""},
		{"multi-attach gp3", CreateVolumeOptions{SizeGiB: 1, MultiAttach: true}, nil, ErrInvalidArgument, ""},
		{"size EC2 refuses", CreateVolumeOptions{SizeGiB: 70000, Zone: zone}, nil, ErrInvalidArgument, "accepts any size (EC2: gp3 up to 64 TiB, InvalidParameterValue beyond)"},
		{"unknown zone", CreateVolumeOptions{SizeGiB: 1, Zone: "mars-1a"}, nil, ErrInvalidArgument, "accepts a zone that does not exist and makes a volume without one"},
		{"missing snapshot", CreateVolumeOptions{Zone: zone, SnapshotID: "snap-0123456789abcdef0"}, nil, ErrNotFound, ""},
		{"missing clone source", CreateVolumeOptions{SizeGiB: 1, SourceVolumeID: "vol-0123456789abcdef0"}, nil, ErrNotFound, ""},
		{"clone in another zone", CreateVolumeOptions{SizeGiB: 4, SourceVolumeID: cloneSource.ID, Zone: "us-east-1c"}, nil, ErrInvalidArgument, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.motoLacks != "" {
				emulatorOnly(t, tc.motoLacks)
			}
			v, err := c.CreateVolume(testContext(t), fmt.Sprintf("pvc-%d", i), &tc.opts)
			wantErr(t, err, tc.err)
			if err != nil {
				return
			}
			if v.State != volumeAvailable || v.Name != fmt.Sprintf("pvc-%d", i) {
				t.Errorf("state %s name %q, want an available volume named pvc-%d", v.State, v.Name, i)
			}
			tc.check(t, v)
		})
	}
}

func TestCreateVolumeIsIdempotent(t *testing.T) {
	t.Parallel()
	c, env := start(t, emulatortest.Options{})
	opts := &CreateVolumeOptions{SizeGiB: 2}
	first := mustCreate(t, c, "pvc-a", opts)
	again := mustCreate(t, c, "pvc-a", opts)
	if again.ID != first.ID {
		t.Fatalf("retry made %s, first call made %s", again.ID, first.ID)
	}
	if vols, err := c.volumesNamed(testContext(t), "pvc-a"); err != nil || len(vols) != 1 {
		t.Errorf("volumes named pvc-a: %v, %v; want the first one alone", vols, err)
	}
	_, err := c.CreateVolume(testContext(t), "pvc-a", &CreateVolumeOptions{SizeGiB: 3})
	wantErr(t, err, ErrAlreadyExists)
	// The pick of a zone is stable, so a new process asks for the same one.
	if again := mustCreate(t, newCloud(t, env, testConfig()), "pvc-a", opts); again.ID != first.ID {
		t.Errorf("a restarted controller made %s", again.ID)
	}
}

// createEventually calls CreateVolume as the external-provisioner does:
// again after every error that is not final, until the deadline.
func createEventually(t testing.TB, c Cloud, name string, opts *CreateVolumeOptions) *Volume {
	t.Helper()
	ctx := testContext(t)
	for {
		v, err := c.CreateVolume(ctx, name, opts)
		if err == nil {
			return v
		}
		if !errors.Is(err, ErrRetryLater) || ctx.Err() != nil {
			t.Fatalf("CreateVolume(%s): %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCreateVolumeTokenRecoveryAcrossRestart: the name's first ClientToken
// was spent by an earlier attempt whose volume is gone, so the first
// controller gets IdempotentParameterMismatch and, once a lookup by name
// can be trusted to show a volume of that name, creates the volume with the
// next token. A restarted controller whose name lookup cannot help (the
// name tag is gone, as after an operator's edit) must walk the same
// sequence and return that volume, not make a second one.
func TestCreateVolumeTokenRecoveryAcrossRestart(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, motoIgnoresClientToken)
	env := emulatortest.Start(t, emulatortest.Options{})
	ctx := testContext(t)
	old, err := rawClient(env).CreateVolume(ctx, &ec2.CreateVolumeInput{
		AvailabilityZone: aws.String(env.Zone()), Size: aws.Int32(2), ClientToken: aws.String(clientToken("pvc-r", 0)),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{
			{Key: aws.String(TagVolumeName), Value: aws.String("pvc-r")}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawClient(env).DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: old.VolumeId}); err != nil {
		t.Fatal(err)
	}

	opts := &CreateVolumeOptions{SizeGiB: 2, Zone: env.Zone()}
	first := createEventually(t, newCloud(t, env, testConfig()), "pvc-r", opts)
	if first.ID == aws.ToString(old.VolumeId) {
		t.Fatal("got the deleted volume back")
	}
	if _, err := rawClient(env).DeleteTags(ctx, &ec2.DeleteTagsInput{
		Resources: []string{first.ID}, Tags: []types.Tag{{Key: aws.String(TagVolumeName)}},
	}); err != nil {
		t.Fatal(err)
	}

	again := createEventually(t, newCloud(t, env, testConfig()), "pvc-r", opts)
	if again.ID != first.ID {
		t.Fatalf("the restarted controller returned %s, want %s", again.ID, first.ID)
	}
	if n := liveDataVolumes(env); n != 1 {
		t.Errorf("%d volumes exist, want 1", n)
	}
}

// TestCreateVolumeLostVolumeMovesToNextToken: the volume the first token
// made is gone; a new controller finds token 0 refused, and no volume by
// name, and makes one with token 1; every later controller returns that one.
func TestCreateVolumeLostVolumeMovesToNextToken(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, motoIgnoresClientToken)
	env := emulatortest.Start(t, emulatortest.Options{})
	cfg := testConfig()
	cfg.VisibilityTimeout = time.Millisecond
	opts := &CreateVolumeOptions{SizeGiB: 2, Zone: env.Zone()}
	lost := mustCreate(t, newCloud(t, env, cfg), "pvc-l", opts)
	if _, err := rawClient(env).DeleteVolume(testContext(t), &ec2.DeleteVolumeInput{VolumeId: aws.String(lost.ID)}); err != nil {
		t.Fatal(err)
	}
	replacement := createEventually(t, newCloud(t, env, cfg), "pvc-l", opts)
	if replacement.ID == lost.ID {
		t.Fatal("got the lost volume back")
	}
	for range 2 {
		if again := createEventually(t, newCloud(t, env, cfg), "pvc-l", opts); again.ID != replacement.ID {
			t.Fatalf("a restarted controller got %s, want %s", again.ID, replacement.ID)
		}
	}
}

// liveDataVolumes counts the emulator's volumes that are neither an
// instance's root volume nor being deleted (whatever their tags).
func liveDataVolumes(env *emulatortest.Env) int {
	n := 0
	for _, v := range env.Cloud().Volumes() {
		if !v.Root && v.State != model.VolumeDeleting {
			n++
		}
	}
	return n
}

func TestConcurrentCreatesMakeOneVolumePerName(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, motoIgnoresClientToken)
	c, env := start(t, emulatortest.Options{})
	const names, copies = 100, 2
	ids := make([][]string, names)
	for i := range ids {
		ids[i] = make([]string, copies)
	}
	var wg sync.WaitGroup
	for i := range names {
		for j := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := c.CreateVolume(testContext(t), fmt.Sprintf("pvc-%d", i), &CreateVolumeOptions{SizeGiB: 1})
				if err != nil {
					t.Error(err)
					return
				}
				ids[i][j] = v.ID
			}()
		}
	}
	wg.Wait()
	for i, got := range ids {
		if got[0] != got[1] {
			t.Errorf("pvc-%d: concurrent creates returned %v", i, got)
		}
	}
	if n := len(namedVolumes(t, env)); n != names {
		t.Errorf("%d volumes exist, want exactly %d", n, names)
	}
}

// TestCreateVolumeEventualConsistency: a new volume is missing from
// DescribeVolumes for a second; CreateVolume keeps waiting instead of
// failing or creating another.
func TestCreateVolumeEventualConsistency(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{Faults: faults.Config{EventualConsistency: faults.Duration(time.Second)}}, motoLacksFaults)
	v := mustCreate(t, c, "pvc-ec", &CreateVolumeOptions{SizeGiB: 1})
	if v.State != volumeAvailable {
		t.Errorf("state %s", v.State)
	}
	if n := env.CallsWithCode("DescribeVolumes", "InvalidVolume.NotFound"); n == 0 {
		t.Error("DescribeVolumes never missed the new volume; the test did not exercise eventual consistency")
	}
	if n := env.Calls("CreateVolume"); n != 1 {
		t.Errorf("%d CreateVolume calls, want 1", n)
	}
}

func TestDeleteVolume(t *testing.T) {
	t.Parallel()
	c, env := start(t, emulatortest.Options{})
	v := mustCreate(t, c, "pvc-del", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
	attached := mustCreate(t, c, "pvc-att", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
	if _, err := c.AttachVolume(testContext(t), attached.ID, env.instance(0), AttachOptions{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		id   string
		err  error
	}{
		{"available volume", v.ID, nil},
		{"already deleted", v.ID, ErrNotFound},
		{"never existed", "vol-0123456789abcdef0", ErrNotFound},
		{"malformed ID", "not-a-volume", ErrNotFound},
		{"attached", attached.ID, ErrInUse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, c.DeleteVolume(testContext(t), tc.id), tc.err)
		})
	}
	named, err := c.volumesNamed(testContext(t), "pvc-del")
	if len(named) != 0 || !errors.Is(err, ErrNotFound) {
		t.Errorf("volumes named pvc-del after the delete: %v, %v; want none", named, err)
	}
}

func TestGetVolume(t *testing.T) {
	t.Parallel()
	c, _ := start(t, emulatortest.Options{})
	v := mustCreate(t, c, "pvc-get", &CreateVolumeOptions{SizeGiB: 7})
	tests := []struct {
		name string
		get  func() (*Volume, error)
		err  error
	}{
		{"by ID", func() (*Volume, error) { return c.GetVolume(testContext(t), v.ID) }, nil},
		{"missing ID", func() (*Volume, error) { return c.GetVolume(testContext(t), "vol-0123456789abcdef0") }, ErrNotFound},
		{"malformed ID", func() (*Volume, error) { return c.GetVolume(testContext(t), "bogus") }, ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.get()
			wantErr(t, err, tc.err)
			if err == nil && (got.ID != v.ID || got.SizeGiB != 7 || got.Name != "pvc-get") {
				t.Errorf("got %+v, want %+v", got, v)
			}
		})
	}
}

func TestListVolumesPaginates(t *testing.T) {
	t.Parallel()
	c, _ := start(t, emulatortest.Options{})
	want := map[string]bool{}
	for i := range 12 {
		want[mustCreate(t, c, fmt.Sprintf("pvc-%d", i), &CreateVolumeOptions{SizeGiB: 1}).ID] = true
	}
	for _, size := range []int32{0, 1, 2, 5, 7, 500} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			seen := map[string]bool{}
			token := ""
			for pages := 1; ; pages++ {
				page, err := c.ListVolumes(testContext(t), ListOptions{MaxResults: size, NextToken: token})
				if err != nil {
					t.Fatal(err)
				}
				if size > 0 && len(page.Volumes) > int(size) {
					t.Fatalf("page of %d, asked for %d", len(page.Volumes), size)
				}
				for _, v := range page.Volumes {
					if seen[v.ID] {
						t.Fatalf("%s listed twice", v.ID)
					}
					seen[v.ID] = true
				}
				if token = page.NextToken; token == "" {
					break
				}
				if pages > 20 {
					t.Fatal("pagination does not end")
				}
			}
			for id := range want {
				if !seen[id] {
					t.Errorf("%s was not listed", id)
				}
			}
			if len(seen) != len(want)+1 {
				t.Errorf("listed %d volumes, want %d and the instance's root volume", len(seen), len(want))
			}
		})
	}
	_, err := c.ListVolumes(testContext(t), ListOptions{NextToken: "garbage!"})
	wantErr(t, err, ErrInvalidArgument)
}
