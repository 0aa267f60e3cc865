package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/cloud"
)

func TestVolumeSize(t *testing.T) {
	tests := []struct {
		name      string
		r         *csi.CapacityRange
		t         cloud.VolumeType
		sourceGiB int64
		want      int32
		code      codes.Code
	}{
		{name: "no range gives the default", r: nil, t: cloud.VolumeTypeGP3, want: DefaultVolumeSizeGiB},
		{name: "default raised to the type minimum", r: nil, t: cloud.VolumeTypeST1, want: 125},
		{name: "rounds up to GiB", r: &csi.CapacityRange{RequiredBytes: GiB + 1}, t: cloud.VolumeTypeGP3, want: 2},
		{name: "exact GiB", r: &csi.CapacityRange{RequiredBytes: 10 * GiB, LimitBytes: 10 * GiB}, t: cloud.VolumeTypeGP3, want: 10},
		{name: "one byte is one GiB", r: &csi.CapacityRange{RequiredBytes: 1}, t: cloud.VolumeTypeGP2, want: 1},
		{name: "raised to io2 minimum", r: &csi.CapacityRange{RequiredBytes: GiB}, t: cloud.VolumeTypeIO2, want: 4},
		{name: "limit only caps the default", r: &csi.CapacityRange{LimitBytes: 20*GiB + 5}, t: cloud.VolumeTypeGP3, want: 20},
		{name: "source snapshot size wins", r: &csi.CapacityRange{RequiredBytes: GiB}, t: cloud.VolumeTypeGP3, sourceGiB: 8, want: 8},
		{name: "larger than the source is fine", r: &csi.CapacityRange{RequiredBytes: 9 * GiB}, t: cloud.VolumeTypeGP3, sourceGiB: 8, want: 9},
		{name: "gp3 maximum", r: &csi.CapacityRange{RequiredBytes: 65536 * GiB}, t: cloud.VolumeTypeGP3, want: 65536},

		{name: "negative", r: &csi.CapacityRange{RequiredBytes: -1}, t: cloud.VolumeTypeGP3, code: codes.InvalidArgument},
		{name: "required above limit", r: &csi.CapacityRange{RequiredBytes: 2 * GiB, LimitBytes: GiB}, t: cloud.VolumeTypeGP3, code: codes.InvalidArgument},
		{name: "no GiB between", r: &csi.CapacityRange{RequiredBytes: GiB + 1, LimitBytes: GiB + 2}, t: cloud.VolumeTypeGP3, code: codes.OutOfRange},
		{name: "limit below the type minimum", r: &csi.CapacityRange{LimitBytes: 100 * GiB}, t: cloud.VolumeTypeSC1, code: codes.OutOfRange},
		{name: "limit below one GiB", r: &csi.CapacityRange{LimitBytes: 1000}, t: cloud.VolumeTypeGP3, code: codes.OutOfRange},
		{name: "limit below the source", r: &csi.CapacityRange{RequiredBytes: GiB, LimitBytes: 4 * GiB}, t: cloud.VolumeTypeGP3, sourceGiB: 8, code: codes.OutOfRange},
		{name: "above gp2 maximum", r: &csi.CapacityRange{RequiredBytes: 16385 * GiB}, t: cloud.VolumeTypeGP2, code: codes.OutOfRange},
		{name: "above standard maximum", r: &csi.CapacityRange{RequiredBytes: 1025 * GiB}, t: cloud.VolumeTypeStandard, code: codes.OutOfRange},
		{name: "huge", r: &csi.CapacityRange{RequiredBytes: 1<<63 - 1}, t: cloud.VolumeTypeIO2, code: codes.OutOfRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := volumeSize(tc.r, tc.t, tc.sourceGiB)
			if tc.code != codes.OK {
				if status.Code(err) != tc.code {
					t.Fatalf("volumeSize = %d, %v; want code %v", got, err, tc.code)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("volumeSize = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func zoneSeg(zone string) *csi.Topology {
	return &csi.Topology{Segments: map[string]string{TopologyZoneKey: zone, "kubernetes.io/os": "linux"}}
}

func TestPlace(t *testing.T) {
	idSeg := &csi.Topology{Segments: map[string]string{TopologyZoneIDKey: "use1-az4"}}
	osOnly := &csi.Topology{Segments: map[string]string{"kubernetes.io/os": "linux"}}
	tests := []struct {
		name       string
		req        *csi.TopologyRequirement
		wantZone   string
		wantZoneID string
		allowed    []string // zones that must be allowed
		denied     []string // zones that must not be
	}{
		{name: "none", req: nil, allowed: []string{"us-east-1a", "anything"}},
		{name: "segments without a zone", req: &csi.TopologyRequirement{Requisite: []*csi.Topology{osOnly}}, allowed: []string{"us-east-1c"}},
		{name: "preferred first", req: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{zoneSeg("us-east-1a"), zoneSeg("us-east-1b")},
			Preferred: []*csi.Topology{zoneSeg("us-east-1b"), zoneSeg("us-east-1a")},
		}, wantZone: "us-east-1b", allowed: []string{"us-east-1a", "us-east-1b"}, denied: []string{"us-east-1c"}},
		{name: "single requisite", req: &csi.TopologyRequirement{Requisite: []*csi.Topology{zoneSeg("us-east-1c")}},
			wantZone: "us-east-1c", denied: []string{"us-east-1a"}},
		{name: "zone ID", req: &csi.TopologyRequirement{Requisite: []*csi.Topology{idSeg}}, wantZoneID: "use1-az4", denied: []string{"us-east-1a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := place("pvc-1", tc.req)
			if p.zone != tc.wantZone || p.zoneID != tc.wantZoneID {
				t.Fatalf("place = %q/%q, want %q/%q", p.zone, p.zoneID, tc.wantZone, tc.wantZoneID)
			}
			for _, z := range tc.allowed {
				if !p.allows(z, "") {
					t.Errorf("zone %s must be allowed", z)
				}
			}
			for _, z := range tc.denied {
				if p.allows(z, "") {
					t.Errorf("zone %s must not be allowed", z)
				}
			}
		})
	}
	t.Run("zone ID allows by ID", func(t *testing.T) {
		p := place("x", &csi.TopologyRequirement{Requisite: []*csi.Topology{idSeg}})
		if !p.allows("us-east-1c", "use1-az4") || p.allows("us-east-1c", "use1-az1") {
			t.Fatal("zone ID placement must match on the zone ID")
		}
	})
}

// TestPlaceSpreadsDeterministically checks that requisite-only requests land
// in every zone across names, and that one name always gets the same zone
// whatever the order of the segments (so a retry reuses its ClientToken).
func TestPlaceSpreadsDeterministically(t *testing.T) {
	zones := []string{"us-east-1a", "us-east-1b", "us-east-1c"}
	seen := map[string]bool{}
	for i := range 60 {
		name := fmt.Sprintf("pvc-%d", i)
		fwd := &csi.TopologyRequirement{Requisite: []*csi.Topology{zoneSeg(zones[0]), zoneSeg(zones[1]), zoneSeg(zones[2])}}
		rev := &csi.TopologyRequirement{Requisite: []*csi.Topology{zoneSeg(zones[2]), zoneSeg(zones[1]), zoneSeg(zones[0])}}
		a, b := place(name, fwd), place(name, rev)
		if a.zone != b.zone {
			t.Fatalf("%s: %s vs %s depending on segment order", name, a.zone, b.zone)
		}
		seen[a.zone] = true
	}
	if len(seen) != len(zones) {
		t.Fatalf("60 names used zones %v, want all of %v", slices.Sorted(maps.Keys(seen)), zones)
	}
}

func TestCheckCapabilities(t *testing.T) {
	mount := func(mode csi.VolumeCapability_AccessMode_Mode, fs string) *csi.VolumeCapability {
		return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	}
	block := func(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
		return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	}
	tests := []struct {
		name string
		caps []*csi.VolumeCapability
		want capabilitySet
		err  string
	}{
		{name: "single node writer mount", caps: []*csi.VolumeCapability{mount(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "")}, want: capabilitySet{mount: true}},
		{name: "every single-node mode", caps: []*csi.VolumeCapability{
			mount(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, "XFS"),
			mount(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, "xfs"),
			block(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY),
		}, want: capabilitySet{mount: true, block: true, fsType: "xfs"}},
		{name: "multi-node block", caps: []*csi.VolumeCapability{block(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), block(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)},
			want: capabilitySet{block: true, multiNode: true}},

		{name: "none", caps: nil, err: "volume capabilities are missing"},
		{name: "nil entry", caps: []*csi.VolumeCapability{nil}, err: "capability 1: is empty"},
		{name: "no access type", caps: []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}, err: "access type is missing"},
		{name: "no access mode", caps: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}}, err: "access mode is missing"},
		{name: "unknown mode", caps: []*csi.VolumeCapability{block(csi.VolumeCapability_AccessMode_UNKNOWN)}, err: "not supported"},
		{name: "multi-node single writer", caps: []*csi.VolumeCapability{block(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)}, err: "not supported"},
		{name: "multi-node filesystem", caps: []*csi.VolumeCapability{mount(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "ext4")}, err: "needs a raw block volume"},
		{name: "read-only many filesystem", caps: []*csi.VolumeCapability{mount(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, "")}, err: "needs a raw block volume"},
		{name: "unsupported fs", caps: []*csi.VolumeCapability{mount(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "btrfs")}, err: "not supported"},
		{name: "two filesystems", caps: []*csi.VolumeCapability{mount(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4"), mount(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "xfs")}, err: "conflicts with ext4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkCapabilities(tc.caps)
			if tc.err != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want InvalidArgument containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("checkCapabilities = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestPageToken(t *testing.T) {
	for _, tok := range []pageToken{
		{},
		{cloudToken: "abc:def==", pageSize: 5, offset: 3},
		{cloudToken: strings.Repeat("x", 500), pageSize: 500, offset: 499},
	} {
		got, err := decodePageToken(tok.encode())
		if err != nil || got != tok {
			t.Fatalf("round trip of %+v = %+v, %v", tok, got, err)
		}
	}
	for _, bad := range []string{"invalid-token", "!!!", pageToken{pageSize: 5}.encode()[1:], "MjoxOjI6eA", "MTotMToyOng", "MTo1Oi0xOng", "MTo5OTk5OjE6eA"} {
		if _, err := decodePageToken(bad); status.Code(err) != codes.Aborted {
			t.Errorf("decodePageToken(%q) = %v, want Aborted", bad, err)
		}
	}
}

// TestPaginate drives paginate over an in-memory list of cloud pages,
// including empty pages and CSI pages smaller than a cloud page.
func TestPaginate(t *testing.T) {
	cloudPages := [][]int{{1, 2, 3, 4, 5, 6, 7}, {}, {}, {8, 9}, {10}}
	fetch := func(_ context.Context, token string, size int32) ([]int, string, error) {
		i := 0
		if token != "" {
			if _, err := fmt.Sscanf(token, "p%d", &i); err != nil {
				return nil, "", fmt.Errorf("bad token %q: %w", token, cloud.ErrInvalidArgument)
			}
		}
		next := ""
		if i+1 < len(cloudPages) {
			next = fmt.Sprintf("p%d", i+1)
		}
		return cloudPages[i], next, nil
	}
	for _, maxEntries := range []int32{0, 1, 2, 3, 7, 100} {
		t.Run(fmt.Sprint(maxEntries), func(t *testing.T) {
			var all []int
			token := ""
			for calls := 0; ; calls++ {
				if calls > 20 {
					t.Fatal("pagination does not end")
				}
				items, next, err := paginate(context.Background(), "numbers", token, maxEntries, fetch)
				if err != nil {
					t.Fatal(err)
				}
				if maxEntries > 0 && len(items) > int(maxEntries) {
					t.Fatalf("page of %d entries, max %d", len(items), maxEntries)
				}
				all = append(all, items...)
				if next == "" {
					break
				}
				token = next
			}
			if want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(all, want) {
				t.Fatalf("listed %v, want %v", all, want)
			}
		})
	}
	t.Run("negative max", func(t *testing.T) {
		if _, _, err := paginate(context.Background(), "numbers", "", -1, fetch); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("error = %v, want InvalidArgument", err)
		}
	})
	t.Run("cloud refuses the token", func(t *testing.T) {
		tok := pageToken{cloudToken: "garbage", pageSize: 5}.encode()
		if _, _, err := paginate(context.Background(), "numbers", tok, 0, fetch); status.Code(err) != codes.Aborted {
			t.Fatalf("error = %v, want Aborted", err)
		}
	})
	t.Run("cloud failure", func(t *testing.T) {
		failing := func(context.Context, string, int32) ([]int, string, error) {
			return nil, "", fmt.Errorf("EC2 down: %w", cloud.ErrUnavailable)
		}
		if _, _, err := paginate(context.Background(), "numbers", "", 0, failing); status.Code(err) != codes.Unavailable {
			t.Fatalf("error = %v, want Unavailable", err)
		}
	})
}

func TestMergeModifyRequests(t *testing.T) {
	base := modifyRequest{volume: cloud.VolumeModification{SizeGiB: 10, IOPS: 3000}, setTags: map[string]string{"a": "1"}, deleteTags: []string{"old"}}
	tests := []struct {
		name string
		in   modifyRequest
		want modifyRequest
		err  string
	}{
		{name: "expand joins modify", in: modifyRequest{volume: cloud.VolumeModification{SizeGiB: 20}},
			want: modifyRequest{volume: cloud.VolumeModification{SizeGiB: 20, IOPS: 3000}, setTags: map[string]string{"a": "1"}, deleteTags: []string{"old"}}},
		{name: "smaller size keeps the larger", in: modifyRequest{volume: cloud.VolumeModification{SizeGiB: 5, Throughput: 300, Type: cloud.VolumeTypeGP3}},
			want: modifyRequest{volume: cloud.VolumeModification{SizeGiB: 10, IOPS: 3000, Throughput: 300, Type: cloud.VolumeTypeGP3}, setTags: map[string]string{"a": "1"}, deleteTags: []string{"old"}}},
		{name: "same values", in: modifyRequest{volume: cloud.VolumeModification{IOPS: 3000}, setTags: map[string]string{"a": "1", "b": "2"}, deleteTags: []string{"old", "older"}},
			want: modifyRequest{volume: cloud.VolumeModification{SizeGiB: 10, IOPS: 3000}, setTags: map[string]string{"a": "1", "b": "2"}, deleteTags: []string{"old", "older"}}},
		{name: "iops conflict", in: modifyRequest{volume: cloud.VolumeModification{IOPS: 4000}}, err: "iops 4000 conflicts with 3000"},
		{name: "tag value conflict", in: modifyRequest{setTags: map[string]string{"a": "2"}}, err: `tag "a" value 2 conflicts with 1`},
		{name: "set a removed tag", in: modifyRequest{setTags: map[string]string{"old": "x"}}, err: `tag "old"`},
		{name: "remove a set tag", in: modifyRequest{deleteTags: []string{"a"}}, err: `tag "a"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := modifyRequest{volume: base.volume, setTags: maps.Clone(base.setTags), deleteTags: slices.Clone(base.deleteTags)}
			got, err := mergeModifyRequests(base, tc.in)
			if !maps.Equal(base.setTags, before.setTags) || !slices.Equal(base.deleteTags, before.deleteTags) {
				t.Fatal("merge modified the pending request in place")
			}
			if tc.err != "" {
				if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want Aborted containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.volume != tc.want.volume || !maps.Equal(got.setTags, tc.want.setTags) || !slices.Equal(got.deleteTags, tc.want.deleteTags) {
				t.Fatalf("merged = %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("type conflict", func(t *testing.T) {
		_, err := mergeModifyRequests(modifyRequest{volume: cloud.VolumeModification{Type: cloud.VolumeTypeIO2}},
			modifyRequest{volume: cloud.VolumeModification{Type: cloud.VolumeTypeGP3}})
		if status.Code(err) != codes.Aborted {
			t.Fatalf("error = %v, want Aborted", err)
		}
	})
}

func TestCodeFor(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("x: %w", cloud.ErrNotFound), codes.NotFound},
		{fmt.Errorf("x: %w", cloud.ErrAlreadyExists), codes.AlreadyExists},
		{fmt.Errorf("x: %w", cloud.ErrIdempotentParameterMismatch), codes.AlreadyExists},
		{fmt.Errorf("x: %w", cloud.ErrInvalidArgument), codes.InvalidArgument},
		{fmt.Errorf("x: %w", cloud.ErrLimitExceeded), codes.ResourceExhausted},
		{&cloud.AttachedElsewhereError{VolumeID: "vol-1", InstanceIDs: []string{"i-1"}}, codes.FailedPrecondition},
		{fmt.Errorf("x: %w", cloud.ErrInUse), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", cloud.ErrConflict), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", cloud.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("x: %w", cloud.ErrPermissionDenied), codes.PermissionDenied},
		{fmt.Errorf("x: %w", cloud.ErrUnsupported), codes.InvalidArgument},
		{fmt.Errorf("x: %w", cloud.ErrInProgress), codes.DeadlineExceeded},
		{fmt.Errorf("x: %w", cloud.ErrUnexpected), codes.Internal},
		{fmt.Errorf("x: %w: %w", cloud.ErrUnavailable, context.DeadlineExceeded), codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{status.Error(codes.Aborted, "busy"), codes.Aborted},
		{errors.New("something odd"), codes.Internal},
	}
	for _, tc := range tests {
		if got := codeFor(tc.err); got != tc.want {
			t.Errorf("codeFor(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	err := failed(status.Error(codes.Aborted, "conflicts"), "expand volume %s", "vol-1")
	if status.Code(err) != codes.Aborted || status.Convert(err).Message() != "expand volume vol-1: conflicts" {
		t.Fatalf("failed() = %v", err)
	}
}
