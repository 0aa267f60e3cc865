package parameters

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkFuzzResult holds whatever a parser returns to the rules every input
// must obey: an error is a *Error (which the controller turns into
// InvalidArgument), and an accepted result carries only tags EC2 accepts
// and the driver does not reserve for itself.
func checkFuzzResult(t *testing.T, err error, tagMaps ...map[string]string) {
	t.Helper()
	if err != nil {
		var perr *Error
		if !errors.As(err, &perr) {
			t.Fatalf("error %v (%T) is not a *parameters.Error", err, err)
		}
		if perr.Error() == "" {
			t.Fatal("an error must say what is wrong")
		}
		return
	}
	for _, tags := range tagMaps {
		for k, v := range tags {
			if k == "" || !utf8.ValidString(k) || utf8.RuneCountInString(k) > maxTagKeyLength {
				t.Fatalf("accepted bad tag key %q", k)
			}
			if !utf8.ValidString(v) || utf8.RuneCountInString(v) > maxTagValueLength {
				t.Fatalf("accepted bad value for tag %q: %q", k, v)
			}
		}
	}
}

// checkNoReservedUserTags skips the tags the driver itself sets and checks
// that none of the rest (what users' templates produced) uses a reserved key.
func checkNoReservedUserTags(t *testing.T, p *Parser, tags map[string]string) {
	t.Helper()
	for k := range tags {
		if _, owner := p.ownerTags[k]; owner || strings.HasPrefix(k, "kubernetes.io/created-for/") {
			continue
		}
		if err := p.checkUserTagKey("fuzz", k); err != nil {
			t.Fatalf("accepted reserved tag %q: %v", k, err)
		}
	}
}

// FuzzVolumeParameters feeds arbitrary StorageClass and
// VolumeAttributesClass entries to the CreateVolume parser.
func FuzzVolumeParameters(f *testing.F) {
	f.Add("type", "io2", "iops", "5000", "")
	f.Add("iopsPerGB", "50", "throughput", "125", "ext4")
	f.Add("blockSize", "4096", "type", "gp3", "xfs")
	f.Add("ext4ClusterSize", "65536", "tagSpecification_1", "a={{ .PVName }}", "ext4")
	f.Add("tagSpecification_1", "k={{ substring 1 -3 .PVCName | toUpper }}", "TYPE", "GP2", "")
	f.Add("kmsKeyId", "alias/x", "tagSpecification_2", "CSIVolumeName=x", "")
	f.Add("encrypted", "maybe", "iops", "-1", "btrfs")
	f.Add("tagSpecification_x", "k={{ range 10 }}x{{ end }}", "XXX_FakeKey", "v", "")
	f.Fuzz(func(t *testing.T, key, value, mutableKey, mutableValue, fsType string) {
		p := newTestParser(t, Config{ExtraTags: map[string]string{"team": "x"}})
		params := map[string]string{key: value, KeyPVCName: "claim-0", KeyPVCNamespace: "ns", KeyPVName: "pvc-1"}
		mutable := map[string]string{mutableKey: mutableValue}
		v, err := p.Volume(params, mutable, fsType)
		if (v == nil) == (err == nil) {
			t.Fatalf("Volume returned %+v and %v: want exactly one", v, err)
		}
		if err == nil {
			checkFuzzResult(t, nil, v.Tags, v.Context)
			checkNoReservedUserTags(t, p, v.Tags)
			return
		}
		checkFuzzResult(t, err)
	})
}

// FuzzTagTemplate feeds arbitrary tag templates and claim names to every
// parser that evaluates templates.
func FuzzTagTemplate(f *testing.F) {
	f.Add("owner={{ .PVCNamespace }}/{{ .PVCName }}", "data", "tagDeletion_1", "old")
	f.Add(`k={{ field "-" 1 .PVCName }}`, "a-b-c", "tagDeletion_1", "k")
	f.Add(`k={{ if contains "db" .PVName }}{{ slice .PVName 0 2 }}{{ end }}`, "db", "type", "gp3")
	f.Add(`k={{ call .PVCName }}`, "x", "iops", "0")
	f.Add(`k={{ define "a" }}{{ template "a" }}{{ end }}{{ template "a" }}`, "x", "throughput", "300")
	f.Add(`k={{ print .PVCName .PVCName .PVCName .PVCName }}`, strings.Repeat("é", 100), "tagSpecification_2", "k=v")
	f.Add(`={{ .PVCName }}`, "\xff", "tagDeletion_9", "CSIVolumeName")
	f.Fuzz(func(t *testing.T, spec, name, extraKey, extraValue string) {
		p := newTestParser(t, Config{})

		v, err := p.Volume(map[string]string{"tagSpecification_1": spec, KeyPVCName: name}, nil, "")
		if err == nil {
			checkFuzzResult(t, nil, v.Tags)
			checkNoReservedUserTags(t, p, v.Tags)
		} else {
			checkFuzzResult(t, err)
		}

		m, err := p.Modification(map[string]string{"tagSpecification_1": spec, KeyPVName: name, extraKey: extraValue})
		if err == nil {
			checkFuzzResult(t, nil, m.SetTags)
			checkNoReservedUserTags(t, p, m.SetTags)
			for _, k := range m.DeleteTags {
				if err := p.checkUserTagKey("fuzz", k); err != nil {
					t.Fatalf("accepted deletion of reserved tag %q", k)
				}
			}
		} else {
			checkFuzzResult(t, err)
		}

		s, err := p.Snapshot(map[string]string{"tagSpecification_1": spec, KeyVolumeSnapshotName: name})
		if err == nil {
			checkFuzzResult(t, nil, s.Tags)
			checkNoReservedUserTags(t, p, s.Tags)
		} else {
			checkFuzzResult(t, err)
		}
	})
}
