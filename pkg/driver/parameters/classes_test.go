package parameters

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/cloud"
)

func TestModification(t *testing.T) {
	p := newTestParser(t, Config{ExtraTags: map[string]string{"team": "storage"}})
	tests := []struct {
		name       string
		mutable    map[string]string
		wantVolume cloud.VolumeModification
		wantSet    map[string]string
		wantDelete []string
		wantTags   bool
	}{
		{name: "nothing", mutable: nil, wantSet: map[string]string{}},
		{name: "performance", mutable: map[string]string{"type": "GP3", "IOPS": "6000", "throughput": "500"},
			wantVolume: cloud.VolumeModification{Type: cloud.VolumeTypeGP3, IOPS: 6000, Throughput: 500}, wantSet: map[string]string{}},
		{name: "iops alone", mutable: map[string]string{"iops": "3014"},
			wantVolume: cloud.VolumeModification{IOPS: 3014}, wantSet: map[string]string{}},
		{
			name: "tags only, templated with the resizer's metadata",
			mutable: map[string]string{"tagSpecification_1": "owner={{ .PVCNamespace }}-{{ .PVCName }}", "TAGDELETION_1": "old", "tagDeletion_2": "older",
				KeyPVCName: "db", KeyPVCNamespace: "shop", KeyPVName: "pvc-9"},
			wantSet: map[string]string{"owner": "shop-db"}, wantDelete: []string{"old", "older"}, wantTags: true,
		},
		{name: "the same deletion twice", mutable: map[string]string{"tagDeletion_1": "x", "tagDeletion_2": "x"},
			wantSet: map[string]string{}, wantDelete: []string{"x"}, wantTags: true},
		{name: "an extra tag may be removed", mutable: map[string]string{"tagDeletion_1": "team"},
			wantSet: map[string]string{}, wantDelete: []string{"team"}, wantTags: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := p.Modification(tc.mutable)
			if err != nil {
				t.Fatal(err)
			}
			if m.Volume != tc.wantVolume {
				t.Fatalf("volume = %+v, want %+v", m.Volume, tc.wantVolume)
			}
			if !maps.Equal(m.SetTags, tc.wantSet) || !slices.Equal(m.DeleteTags, tc.wantDelete) {
				t.Fatalf("tags set %v delete %v, want %v %v", m.SetTags, m.DeleteTags, tc.wantSet, tc.wantDelete)
			}
			if m.ChangesTags() != tc.wantTags {
				t.Fatalf("ChangesTags = %v, want %v", m.ChangesTags(), tc.wantTags)
			}
		})
	}
}

func TestModificationRejects(t *testing.T) {
	p := newTestParser(t, Config{})
	tests := []struct {
		name    string
		mutable map[string]string
		want    string
	}{
		{name: "unknown key", mutable: map[string]string{"XXX_FakeKey": "XXX_FakeValue"}, want: `parameter "XXX_FakeKey": is not a VolumeAttributesClass parameter`},
		{name: "storage class only key", mutable: map[string]string{"encrypted": "true"}, want: `"encrypted"`},
		{name: "iopsPerGB", mutable: map[string]string{"iopsPerGB": "3"}, want: `"iopsPerGB"`},
		{name: "bad type", mutable: map[string]string{"type": "nvme"}, want: "unknown volume type"},
		{name: "bad iops", mutable: map[string]string{"iops": "0"}, want: `"iops"`},
		{name: "bad throughput", mutable: map[string]string{"throughput": "-1"}, want: `"throughput"`},
		{name: "iops for gp2", mutable: map[string]string{"type": "gp2", "iops": "3000"}, want: "gp2 has no provisioned IOPS"},
		{name: "throughput for io2", mutable: map[string]string{"type": "io2", "throughput": "300"}, want: "io2 has no provisioned throughput"},
		{name: "twice in different case", mutable: map[string]string{"iops": "3000", "IOPS": "4000"}, want: "given twice"},
		{name: "reserved tag set", mutable: map[string]string{"tagSpecification_1": testDriver + "/cluster=x"}, want: "reserved"},
		{name: "reserved tag deleted", mutable: map[string]string{"tagDeletion_1": "CSIVolumeName"}, want: `parameter "tagDeletion_1": tag key "CSIVolumeName" is reserved`},
		{name: "kubernetes tag deleted", mutable: map[string]string{"tagDeletion_1": "kubernetes.io/created-for/pv/name"}, want: "belong to Kubernetes"},
		{name: "empty deletion", mutable: map[string]string{"tagDeletion_1": ""}, want: "tag key is empty"},
		{name: "set and delete the same tag", mutable: map[string]string{"tagSpecification_1": "k=v", "tagDeletion_1": "k"}, want: "removes tag \"k\" that a tagSpecification"},
		{name: "bad template", mutable: map[string]string{"tagSpecification_1": "k={{ range .PVCName }}x{{ end }}"}, want: `"range" is not allowed`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := p.Modification(tc.mutable)
			if m != nil {
				t.Fatalf("got %+v, want an error", m)
			}
			wantInvalid(t, err, tc.want)
		})
	}
}

func TestSnapshot(t *testing.T) {
	p := newTestParser(t, Config{ExtraTags: map[string]string{"team": "storage"}, ClusterID: "c1"})
	s, err := p.Snapshot(map[string]string{
		"tagSpecification_1":  "from={{ .VolumeSnapshotNamespace }}/{{ .VolumeSnapshotName }}",
		"TagSpecification_2":  "content={{ .VolumeSnapshotContentName }}",
		"tagSpecification_3":  "team=db",
		KeyVolumeSnapshotName: "nightly", KeyVolumeSnapshotNamespace: "shop", KeyVolumeSnapshotContentName: "snapcontent-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"from": "shop/nightly", "content": "snapcontent-1", "team": "db",
		testDriver + "/cluster": "true", "kubernetes.io/cluster/c1": "owned"}
	if !maps.Equal(s.Tags, want) {
		t.Fatalf("tags = %v, want %v", s.Tags, want)
	}

	for _, tc := range []struct {
		name   string
		params map[string]string
		want   string
	}{
		{name: "storage class key", params: map[string]string{"type": "gp3"}, want: `parameter "type": is not a VolumeSnapshotClass parameter`},
		{name: "volume template field", params: map[string]string{"tagSpecification_1": "k={{ .PVCName }}"}, want: "template failed"},
		{name: "reserved", params: map[string]string{"tagSpecification_1": "CSIVolumeSnapshotName=x"}, want: "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := p.Snapshot(tc.params)
			if s != nil {
				t.Fatalf("got %+v, want an error", s)
			}
			wantInvalid(t, err, tc.want)
		})
	}
}

func TestNewParser(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // empty: success
	}{
		{name: "plain", cfg: Config{DriverName: testDriver, ExtraTags: map[string]string{"a": "b", "empty": ""}, ClusterID: "x"}},
		{name: "no driver name", cfg: Config{}, want: "driver name"},
		{name: "reserved extra tag", cfg: Config{DriverName: testDriver, ExtraTags: map[string]string{"CSIVolumeName": "x"}}, want: `parameter "--extra-tags"`},
		{name: "extra tag in driver prefix", cfg: Config{DriverName: testDriver, ExtraTags: map[string]string{testDriver + "/x": "y"}}, want: "belong to the driver"},
		{name: "extra tag value too long", cfg: Config{DriverName: testDriver, ExtraTags: map[string]string{"k": strings.Repeat("v", 300)}}, want: "longer than 256"},
		{name: "cluster id too long", cfg: Config{DriverName: testDriver, ClusterID: strings.Repeat("c", 120)}, want: `parameter "--k8s-tag-cluster-id"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewParser(tc.cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseTagList(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]string
		err  string
	}{
		{in: "", want: map[string]string{}},
		{in: "  ", want: map[string]string{}},
		{in: "a=b", want: map[string]string{"a": "b"}},
		{in: "a=b,c=,d=e=f", want: map[string]string{"a": "b", "c": "", "d": "e=f"}},
		{in: " a =b", want: map[string]string{"a": "b"}},
		{in: "a", err: `"a" is not key=value`},
		{in: "a=b,", err: `"" is not key=value`},
		{in: "=b", err: "tag key is empty"},
		{in: "a=1,a=2", err: "given twice"},
		{in: "aws:x=1", err: "reserved by AWS"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTagList("--extra-tags", tc.in)
			if tc.err != "" {
				wantInvalid(t, err, tc.err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
