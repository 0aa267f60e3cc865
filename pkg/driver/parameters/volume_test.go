package parameters

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

const testDriver = "ebs.csi.diskplane.io"

func newTestParser(t *testing.T, cfg Config) *Parser {
	t.Helper()
	if cfg.DriverName == "" {
		cfg.DriverName = testDriver
	}
	p, err := NewParser(cfg)
	if err != nil {
		t.Fatalf("NewParser: %v", err)
	}
	return p
}

// wantInvalid checks err is a parameter *Error whose message contains want.
func wantInvalid(t *testing.T, err error, want string) {
	t.Helper()
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("error = %v (%T), want a *parameters.Error", err, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %q, want it to contain %q", err, want)
	}
}

func TestVolumeAcceptsEveryKey(t *testing.T) {
	p := newTestParser(t, Config{ExtraTags: map[string]string{"team": "storage", "env": "dev"}, ClusterID: "prod-1"})
	tests := []struct {
		name       string
		params     map[string]string
		mutable    map[string]string
		capFS      string
		check      func(t *testing.T, v *Volume)
		wantTags   map[string]string
		wantFSType string
	}{
		{
			name:   "defaults",
			params: nil,
			check: func(t *testing.T, v *Volume) {
				if v.Type != cloud.VolumeTypeGP3 || v.IOPS != 0 || v.Throughput != 0 || v.Encrypted || len(v.Context) != 0 {
					t.Fatalf("defaults = %+v", v)
				}
			},
			wantFSType: "ext4",
		},
		{
			name: "gp3 performance and encryption",
			params: map[string]string{"type": "gp3", "iops": "4000", "throughput": "250", "encrypted": "true",
				"kmsKeyId": "arn:aws:kms:us-east-1:123456789012:key/abcd"},
			check: func(t *testing.T, v *Volume) {
				if v.IOPS != 4000 || v.Throughput != 250 || !v.Encrypted || v.KMSKeyID != "arn:aws:kms:us-east-1:123456789012:key/abcd" {
					t.Fatalf("got %+v", v)
				}
			},
		},
		{
			name:   "keys and values in any case",
			params: map[string]string{"TYPE": "IO2", "IopsPerGb": "50", "ALLOWAUTOIOPSPERGBINCREASE": "TRUE", "Encrypted": "False"},
			check: func(t *testing.T, v *Volume) {
				if v.Type != cloud.VolumeTypeIO2 || v.IOPSPerGB != 50 || !v.AllowAutoIOPSPerGBIncrease || v.Encrypted {
					t.Fatalf("got %+v", v)
				}
			},
		},
		{
			name:   "kms key implies encryption",
			params: map[string]string{"kmsKeyId": "alias/mine"},
			check: func(t *testing.T, v *Volume) {
				if !v.Encrypted {
					t.Fatal("kmsKeyId must imply encrypted")
				}
			},
		},
		{
			name:   "node encryption travels in the volume context, beside EBS encryption",
			params: map[string]string{"NodeEncryption": "LUKS2", "encrypted": "true"},
			check: func(t *testing.T, v *Volume) {
				if v.NodeEncryption != "luks2" || !v.Encrypted || v.Context["nodeEncryption"] != "luks2" {
					t.Fatalf("got %+v", v)
				}
			},
		},
		{name: "every type", params: map[string]string{"type": "st1"}, check: wantType(cloud.VolumeTypeST1)},
		{name: "sc1", params: map[string]string{"type": "sc1"}, check: wantType(cloud.VolumeTypeSC1)},
		{name: "standard", params: map[string]string{"type": "standard"}, check: wantType(cloud.VolumeTypeStandard)},
		{name: "gp2", params: map[string]string{"type": "gp2"}, check: wantType(cloud.VolumeTypeGP2)},
		{name: "io1", params: map[string]string{"type": "io1", "iops": "100"}, check: wantType(cloud.VolumeTypeIO1)},
		{
			name:       "format options travel in the volume context",
			params:     map[string]string{"csi.storage.k8s.io/fstype": "ext4", "blockSize": "4096", "inodeSize": "256", "bytesPerInode": "16384", "numberOfInodes": "1000", "ext4BigAlloc": "true", "ext4ClusterSize": "65536"},
			wantFSType: "ext4",
			check: func(t *testing.T, v *Volume) {
				want := map[string]string{"fsType": "ext4", "blockSize": "4096", "inodeSize": "256", "bytesPerInode": "16384",
					"numberOfInodes": "1000", "ext4BigAlloc": "true", "ext4ClusterSize": "65536"}
				if !maps.Equal(v.Context, want) {
					t.Fatalf("context = %v, want %v", v.Context, want)
				}
			},
		},
		{
			name:       "capability fs type wins over the parameter",
			params:     map[string]string{"csi.storage.k8s.io/fstype": "ext4", "BLOCKSIZE": "2048"},
			capFS:      "XFS",
			wantFSType: "xfs",
			check: func(t *testing.T, v *Volume) {
				if v.Context[volumecontext.FSTypeKey] != "xfs" || v.Context[volumecontext.BlockSizeKey] != "2048" {
					t.Fatalf("context = %v", v.Context)
				}
			},
		},
		{
			name:     "tags: extra, class, mutable, cluster and created-for",
			params:   map[string]string{"tagSpecification_1": "owner={{ .PVCNamespace }}/{{ .PVCName }}", "tagSpecification_2": "env=prod", KeyPVCName: "data", KeyPVCNamespace: "shop", KeyPVName: "pvc-123"},
			mutable:  map[string]string{"tagSpecification_9": "tier={{ .PVName | toUpper }}"},
			wantTags: map[string]string{"team": "storage", "env": "prod", "owner": "shop/data", "tier": "PVC-123", testDriver + "/cluster": "true", "kubernetes.io/cluster/prod-1": "owned", TagCreatedForPVCName: "data", TagCreatedForPVCNamespace: "shop", TagCreatedForPVName: "pvc-123"},
		},
		{
			name:     "a mutable tag overrides the class's",
			params:   map[string]string{"tagSpecification_1": "tier=bronze"},
			mutable:  map[string]string{"TagSpecification_1": "tier=gold"},
			wantTags: map[string]string{"team": "storage", "env": "dev", "tier": "gold", testDriver + "/cluster": "true", "kubernetes.io/cluster/prod-1": "owned"},
		},
		{
			name:     "a mutable tagDeletion keeps class and extra tags off the new volume",
			params:   map[string]string{"tagSpecification_1": "tier=bronze", "tagSpecification_2": "keep=yes"},
			mutable:  map[string]string{"tagDeletion_1": "tier", "TAGDELETION_2": "team", "tagDeletion_3": "never-set", "tagSpecification_1": "level=gold"},
			wantTags: map[string]string{"env": "dev", "keep": "yes", "level": "gold", testDriver + "/cluster": "true", "kubernetes.io/cluster/prod-1": "owned"},
		},
		{
			name:    "mutable iops and type take precedence",
			params:  map[string]string{"type": "io2", "iopsPerGB": "10"},
			mutable: map[string]string{"iops": "5000", "type": "io1"},
			check: func(t *testing.T, v *Volume) {
				if v.Type != cloud.VolumeTypeIO1 || v.IOPS != 5000 || v.IOPSPerGB != 0 {
					t.Fatalf("got %+v", v)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := p.Volume(tc.params, tc.mutable, tc.capFS)
			if err != nil {
				t.Fatalf("Volume: %v", err)
			}
			if tc.check != nil {
				tc.check(t, v)
			}
			if tc.wantTags != nil && !maps.Equal(v.Tags, tc.wantTags) {
				t.Fatalf("tags = %v, want %v", v.Tags, tc.wantTags)
			}
			if tc.wantFSType != "" && v.FSType != tc.wantFSType {
				t.Fatalf("fs type = %q, want %q", v.FSType, tc.wantFSType)
			}
		})
	}
}

func wantType(want cloud.VolumeType) func(*testing.T, *Volume) {
	return func(t *testing.T, v *Volume) {
		t.Helper()
		if v.Type != want {
			t.Fatalf("type = %q, want %q", v.Type, want)
		}
	}
}

func TestVolumeRejects(t *testing.T) {
	p := newTestParser(t, Config{})
	tests := []struct {
		name    string
		params  map[string]string
		mutable map[string]string
		capFS   string
		want    string
	}{
		{name: "unknown key", params: map[string]string{"volumeSize": "10"}, want: `parameter "volumeSize": is not a StorageClass parameter`},
		{name: "legacy fstype key", params: map[string]string{"fstype": "ext4"}, want: `"fstype"`},
		{name: "same key twice", params: map[string]string{"type": "gp3", "Type": "gp2"}, want: "given twice"},
		{name: "unknown type", params: map[string]string{"type": "gp4"}, want: `unknown volume type "gp4"`},
		{name: "empty type", params: map[string]string{"type": ""}, want: "unknown volume type"},
		{name: "iops not a number", params: map[string]string{"iops": "fast"}, want: `parameter "iops": must be a whole number`},
		{name: "iops zero", params: map[string]string{"iops": "0"}, want: `"iops"`},
		{name: "iops negative", params: map[string]string{"iops": "-3000"}, want: `"iops"`},
		{name: "iops overflows", params: map[string]string{"iops": "2147483648"}, want: `"iops"`},
		{name: "iops fraction", params: map[string]string{"iops": "3000.5"}, want: `"iops"`},
		{name: "iopsPerGB not a number", params: map[string]string{"type": "io1", "iopsPerGB": "ten"}, want: `"iopsPerGB"`},
		{name: "throughput not a number", params: map[string]string{"throughput": "1GiB"}, want: `"throughput"`},
		{name: "allowAuto not a bool", params: map[string]string{"allowAutoIOPSPerGBIncrease": "yes"}, want: "must be true or false"},
		{name: "encrypted not a bool", params: map[string]string{"encrypted": "1"}, want: `parameter "encrypted": must be true or false`},
		{name: "unknown node encryption", params: map[string]string{"nodeEncryption": "luks1"}, want: `parameter "nodeEncryption": is "luks1": the node encrypts with luks2 only`},
		{name: "iops with gp2", params: map[string]string{"type": "gp2", "iops": "3000"}, want: "volume type gp2 has no provisioned IOPS"},
		{name: "iops with st1", params: map[string]string{"type": "st1", "iops": "3000"}, want: "st1 has no provisioned IOPS"},
		{name: "iopsPerGB with sc1", params: map[string]string{"type": "sc1", "iopsPerGB": "3"}, want: `parameter "iopsPerGB": volume type sc1`},
		{name: "iops and iopsPerGB", params: map[string]string{"type": "io2", "iops": "3000", "iopsPerGB": "3"}, want: "cannot be combined"},
		{name: "throughput with io2", params: map[string]string{"type": "io2", "iops": "3000", "throughput": "500"}, want: "io2 has no provisioned throughput"},
		{name: "throughput with standard", params: map[string]string{"type": "standard", "throughput": "500"}, want: "only gp3 does"},
		{name: "kms key with encrypted false", params: map[string]string{"encrypted": "false", "kmsKeyId": "alias/x"}, want: `parameter "encrypted": is false but kmsKeyId is set`},
		{name: "unsupported fs type parameter", params: map[string]string{"csi.storage.k8s.io/fstype": "btrfs"}, want: `parameter "csi.storage.k8s.io/fstype"`},
		{name: "unsupported capability fs type", capFS: "zfs", want: "fs_type of the volume capability"},
		{name: "bad block size", params: map[string]string{"blockSize": "3000"}, want: "blockSize: want a power of two"},
		{name: "bytesPerInode on xfs", params: map[string]string{"bytesPerInode": "4096"}, capFS: "xfs", want: "bytesPerInode cannot be used with filesystem type xfs"},
		{name: "cluster size without bigalloc", params: map[string]string{"ext4ClusterSize": "16384"}, want: "needs ext4BigAlloc=true"},
		{name: "tag without =", params: map[string]string{"tagSpecification_1": "justakey"}, want: `parameter "tagSpecification_1": want key=value`},
		{name: "tag with empty key", params: map[string]string{"tagSpecification_1": "=v"}, want: "tag key is empty"},
		{name: "reserved CSIVolumeName", params: map[string]string{"tagSpecification_1": "CSIVolumeName=x"}, want: "reserved for the driver"},
		{name: "reserved CSIVolumeSnapshotName", params: map[string]string{"tagSpecification_1": "CSIVolumeSnapshotName=x"}, want: "reserved"},
		{name: "reserved kubernetes.io prefix", params: map[string]string{"tagSpecification_1": "kubernetes.io/cluster/x=owned"}, want: "belong to Kubernetes"},
		{name: "reserved created-for", params: map[string]string{"tagSpecification_1": "Kubernetes.io/created-for/pvc/name=x"}, want: "belong to Kubernetes"},
		{name: "reserved driver prefix", params: map[string]string{"tagSpecification_1": testDriver + "/cluster=false"}, want: "belong to the driver"},
		{name: "aws prefix", params: map[string]string{"tagSpecification_1": "AWS:createdBy=me"}, want: "reserved by AWS"},
		{name: "tag key too long", params: map[string]string{"tagSpecification_1": strings.Repeat("k", 129) + "=v"}, want: "longer than 128"},
		{name: "tag value too long", params: map[string]string{"tagSpecification_1": "k=" + strings.Repeat("v", 257)}, want: "longer than 256"},
		{name: "same tag from two specs", params: map[string]string{"tagSpecification_1": "k=a", "tagSpecification_2": "k=b"}, want: `also set by parameter "tagSpecification_1"`},
		{name: "bad template", params: map[string]string{"tagSpecification_1": "k={{ .PVCName"}, want: "bad template"},
		{name: "unknown template field", params: map[string]string{"tagSpecification_1": "k={{ .Namespace }}"}, want: "template failed"},
		{name: "pvc name too long for a tag", params: map[string]string{KeyPVCName: strings.Repeat("n", 300)}, want: "longer than 256"},
		{name: "unknown mutable key", mutable: map[string]string{"XXX_FakeKey": "XXX_FakeValue"}, want: `parameter "XXX_FakeKey": is not a mutable parameter`},
		{name: "tagDeletion of a reserved tag at create", mutable: map[string]string{"tagDeletion_1": "kubernetes.io/created-for/pvc/name"}, want: `parameter "tagDeletion_1": tag key "kubernetes.io/created-for/pvc/name" is reserved`},
		{name: "tagDeletion of the driver's tag at create", mutable: map[string]string{"TagDeletion_1": testDriver + "/cluster"}, want: "belong to the driver"},
		{name: "tagDeletion of a tag the same class sets", mutable: map[string]string{"tagSpecification_1": "tier=gold", "tagDeletion_1": "tier"}, want: `removes tag "tier" that a tagSpecification`},
		{name: "empty tagDeletion at create", mutable: map[string]string{"tagDeletion_1": ""}, want: "tag key is empty"},
		{name: "mutable iopsPerGB", mutable: map[string]string{"iopsPerGB": "3"}, want: "is not a mutable parameter"},
		{name: "mutable bad iops", mutable: map[string]string{"iops": "many"}, want: `"iops"`},
		{name: "mutable type makes class iops invalid", params: map[string]string{"iops": "3000"}, mutable: map[string]string{"type": "gp2"}, want: "gp2 has no provisioned IOPS"},
		{name: "mutable throughput on io1", params: map[string]string{"type": "io2", "iopsPerGB": "10"}, mutable: map[string]string{"iops": "5000", "type": "io1", "throughput": "1"}, want: "io1 has no provisioned throughput"},
		{name: "mutable reserved tag", mutable: map[string]string{"tagSpecification_1": "CSIVolumeName=x"}, want: "reserved"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := p.Volume(tc.params, tc.mutable, tc.capFS)
			if v != nil {
				t.Fatalf("got %+v with error %v; want no result", v, err)
			}
			wantInvalid(t, err, tc.want)
		})
	}
}
