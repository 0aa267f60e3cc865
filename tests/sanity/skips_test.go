package sanity

import (
	"os"
	"strings"
	"testing"
)

// Why specs do not run, shared by the specs of one missing capability.
const (
	noGetCapacity = "Diskplane does not offer GET_CAPACITY: EBS has no pool per zone that fills up " +
		"(an account's quotas are not capacity a scheduler could place volumes by)"
	noPublishReadonly = "Diskplane does not offer PUBLISH_READONLY: EC2 cannot attach a volume read-only; " +
		"read-only access is a read-only mount on the node"
	noSnapshotTopology = "Diskplane does not offer SNAPSHOT_ACCESSIBILITY_CONSTRAINTS: an EBS snapshot is " +
		"regional and restores into any zone of its region"
	noStorageHealth = "Diskplane does not offer GET_STORAGE_HEALTH: the node plugin holds no cloud credentials " +
		"and so cannot tell EC2's health; each volume's health is NodeGetVolumeHealth's and the controller's"
	noGroupController = "Diskplane serves no GroupController service: it does not offer volume group snapshots"
	pendingUpstream   = "pending in csi-test itself (XIt): its authors disabled it as fragile; ListVolumes " +
		"pagination is covered by pkg/driver/controller's list tests and ListSnapshots pagination by the spec " +
		"\"should return next token when a limited number of entries are requested\""
)

// expectedSkips are the csi-sanity specs that do not run against Diskplane,
// for either access type, with the reason; README.md lists the same specs.
// TestSanity fails when the skipped specs differ from these.
var expectedSkips = map[string]string{
	"Controller Service [Controller Server] GetCapacity should return capacity (no optional values added)": noGetCapacity,
	"Controller Service [Controller Server] ListVolumes pagination should detect volumes added between pages " +
		"and accept tokens when the last volume from a page is deleted": pendingUpstream,
	"Controller Service [Controller Server] ControllerPublishVolume should fail when the volume is already published but is incompatible":       noPublishReadonly,
	"CreateSnapshot [Controller Server] should succeed when creating a snapshot with accessibility requirements":                                noSnapshotTopology,
	"Node Service NodeGetStorageHealth should return appropriate response":                                                                      noStorageHealth,
	"GroupController Service [GroupController Server] GroupControllerGetCapabilities should return appropriate capabilities":                    noGroupController,
	"GroupController Service [GroupController VolumeGroupSnapshots] CreateVolumeGroupSnapshot should fail when no name is provided":             noGroupController,
	"GroupController Service [GroupController VolumeGroupSnapshots] GetVolumeGroupSnapshot should fail when no volume id is provided":           noGroupController,
	"GroupController Service [GroupController VolumeGroupSnapshots] GetVolumeGroupSnapshot should fail when an invalid volume id is used":       noGroupController,
	"GroupController Service [GroupController VolumeGroupSnapshots] DeleteVolumeGroupSnapshot should fail when no volume id is provided":        noGroupController,
	"GroupController Service [GroupController VolumeGroupSnapshots] DeleteVolumeGroupSnapshot should succeed when an invalid volume id is used": noGroupController,
}

// TestReadmeListsSkips keeps README.md's table of skipped specs in step with
// expectedSkips: every skipped spec appears there, with its reason.
func TestReadmeListsSkips(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	for spec, reason := range expectedSkips {
		t.Run(spec, func(t *testing.T) {
			for _, want := range []string{spec, reason} {
				if !strings.Contains(text, want) {
					t.Errorf("README.md does not contain %q", want)
				}
			}
		})
	}
}
