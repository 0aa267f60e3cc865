package node

import (
	"bytes"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestBadRequestsAreRefusedAtTheEdge: each node RPC refuses a volume context,
// capability or secret it cannot act on with InvalidArgument naming what to
// fix, before it touches the node.
func TestBadRequestsAreRefusedAtTheEdge(t *testing.T) {
	withContext := func(vc map[string]string, secrets map[string]string, c *csi.VolumeCapability) (*csi.NodeStageVolumeRequest, *csi.NodePublishVolumeRequest) {
		st, pub := stageReq(c), publishReq(c)
		st.VolumeContext, pub.VolumeContext = vc, vc
		st.Secrets = secrets
		return st, pub
	}
	kmsMissingRole := kmsContext()
	delete(kmsMissingRole, "nodeEncryptionRoleArn")
	for _, tc := range []struct {
		name    string
		vc      map[string]string
		secrets map[string]string
		c       *csi.VolumeCapability
		// want is a part of the message; publishToo: NodePublishVolume
		// refuses it as well (it needs no passphrase).
		want       string
		publishToo bool
	}{
		{"unknown encryption", map[string]string{"nodeEncryption": "aes"}, nil, mountCap("ext4"), "nodeEncryption", true},
		{"unknown key source", map[string]string{"nodeEncryption": "luks2", "nodeEncryptionKeySource": "vault"}, nil, mountCap("ext4"), "nodeEncryptionKeySource", true},
		{"KMS key without its role", kmsMissingRole, nil, mountCap("ext4"), "nodeEncryptionRoleArn", true},
		{"KMS key on raw block", kmsContext(), nil, blockCap(), "raw block volumes", true},
		{"no passphrase", map[string]string{"nodeEncryption": "luks2"}, nil, mountCap("ext4"), "luksPassphrase", false},
		{"unknown filesystem", map[string]string{"fsType": "btrfs"}, nil, mountCap(""), "btrfs", true},
		{"bad format option", map[string]string{"blockSize": "banana"}, nil, mountCap("ext4"), "blockSize", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			st, pub := withContext(tc.vc, tc.secrets, tc.c)
			_, err := s.NodeStageVolume(t.Context(), st)
			wantRefused(t, "NodeStageVolume", err, tc.want)
			if tc.publishToo {
				_, err := s.NodePublishVolume(t.Context(), pub)
				wantRefused(t, "NodePublishVolume", err, tc.want)
			}
			if len(f.calls) != 0 || len(f.mounts) != 0 {
				t.Fatalf("a refused request touched the node: calls %v, mounts %v", f.calls, f.mounts)
			}
		})
	}
}

func wantRefused(t *testing.T, rpc string, err error, want string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v, want InvalidArgument naming %q", rpc, err, want)
	}
}

// TestRequestsParsedOnce: what the edge makes of good requests is what the
// later steps decide from.
func TestRequestsParsedOnce(t *testing.T) {
	s, _ := newTestService(t)

	st := stageReq(mountCap("XFS"))
	st.VolumeContext = map[string]string{"NodeEncryption": "LUKS2", "blockSize": "4096"}
	st.Secrets = map[string]string{"luksPassphrase": "correct horse"}
	r, err := s.parseStage(st)
	if err != nil {
		t.Fatal(err)
	}
	if r.volume.keys != fromSecret || !bytes.Equal(r.passphrase, []byte("correct horse")) || r.volume.fsType != "xfs" ||
		r.volume.block || r.devicePath != "/dev/xvdaa" || !strings.Contains(strings.Join(r.volume.format.MkfsArgs("xfs"), " "), "4096") {
		t.Fatalf("parsed stage: %+v", r)
	}

	pub := publishReq(withMode(mountCap("ext4"), csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY))
	pub.VolumeContext = kmsContext()
	p, err := s.parsePublish(pub)
	if err != nil {
		t.Fatal(err)
	}
	if p.volume.keys != fromKMSKey || p.volume.kms.RoleARN != podRole || p.volume.kms.Namespace != "shop" || !p.readOnly || p.volume.fsType != "ext4" {
		t.Fatalf("parsed publish: %+v", p)
	}

	plain, err := s.parseStage(stageReq(blockCap()))
	if err != nil || plain.volume.encrypted() || !plain.volume.block || plain.passphrase != nil {
		t.Fatalf("parsed plain block stage: %+v, %v", plain, err)
	}

	e, err := s.parseExpand(&csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target, Secrets: map[string]string{"luksPassphrase": "p"},
		CapacityRange: &csi.CapacityRange{RequiredBytes: gib}})
	if err != nil || string(e.passphrase) != "p" || e.requiredBytes != gib || e.block {
		t.Fatalf("parsed expand: %+v, %v", e, err)
	}
}
