package model

import (
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
)

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "no store", cfg: Config{}, wantErr: "disk store is required"},
		{name: "unknown type", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{Type: "x9.huge"}}}, wantErr: "unknown instance type"},
		{name: "unknown zone", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{Zone: "eu-west-1a"}}}, wantErr: "not one of the region's zones"},
		{name: "bad ID", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{ID: "instance-1"}}}, wantErr: "not an instance ID"},
		{name: "two local", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{Local: true}, {Local: true}}}, wantErr: "more than one"},
		{name: "negative interfaces", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{NetworkInterfaces: -1}}}, wantErr: "negative"},
		{name: "fine", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{}, {Type: "t2.medium", Zone: "us-east-1c"}}}},
		{name: "bad private IP", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{PrivateIP: "10.89.0"}}}, wantErr: "not an IPv4 address"},
		{name: "IPv6 private IP", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{PrivateIP: "fd00::1"}}}, wantErr: "not an IPv4 address"},
		{name: "private IP twice", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{PrivateIP: "10.89.0.11"}, {PrivateIP: "10.89.0.11"}}}, wantErr: "declared twice"},
		{name: "view on the local instance", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{Local: true, View: &disks.View{LinkDir: "/dev/x"}}}}, wantErr: "local instance cannot have a view"},
		{name: "relative link directory", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{}, {View: &disks.View{LinkDir: "dev/x"}}}}, wantErr: "absolute path"},
		{name: "relative cgroup", cfg: Config{Store: newFakeStore(), Instances: []InstanceSpec{{}, {View: &disks.View{LinkDir: "/dev/x", DevicesCgroup: "devices/w1"}}}}, wantErr: "absolute path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.withDefaults()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("withDefaults = %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Region != DefaultRegion || len(got.Zones) != 3 || got.ModificationsPerDay != DefaultModificationsPerDay {
				t.Fatalf("defaults not applied: %+v", got)
			}
			if !got.Instances[0].Local || got.Instances[0].Type != DefaultInstanceType || got.Instances[0].Zone != "us-east-1a" {
				t.Fatalf("first instance: %+v", got.Instances[0])
			}
			if tc.cfg.Instances[0].Local {
				t.Fatal("withDefaults changed the caller's instance list")
			}
		})
	}
}

func TestZones(t *testing.T) {
	if got := DefaultZones("us-east-1"); got[0] != (Zone{Name: "us-east-1a", ID: "use1-az1"}) || got[2] != (Zone{Name: "us-east-1c", ID: "use1-az4"}) {
		t.Fatalf("DefaultZones(us-east-1) = %v", got)
	}
	for region, want := range map[string]string{"us-east-1": "use1", "eu-west-2": "euw2", "ap-southeast-1": "apse1", "eu-central-1": "euc1", "ap-northeast-3": "apne3"} {
		if got := shortRegion(region); got != want {
			t.Errorf("shortRegion(%s) = %s, want %s", region, got, want)
		}
	}
	zones, err := ParseZones("eu-west-1a=euw1-az3, eu-west-1b=euw1-az1")
	if err != nil || len(zones) != 2 || zones[1].ID != "euw1-az1" {
		t.Fatalf("ParseZones = %v, %v", zones, err)
	}
	for _, bad := range []string{"", "eu-west-1a", "=x", "a="} {
		if _, err := ParseZones(bad); err == nil {
			t.Errorf("ParseZones(%q) accepted", bad)
		}
	}
}

func TestInstancesAreLaunchedOnce(t *testing.T) {
	tc := newTestCloud(t, Config{Instances: []InstanceSpec{{Type: "m5.large", NetworkInterfaces: 2, Tags: map[string]string{"Name": "node-1"}}}})
	ins := tc.Instances()
	if len(ins) != 1 || !ins[0].Local || len(ins[0].NetworkInterfaces) != 2 || ins[0].Tags["Name"] != "node-1" {
		t.Fatalf("instances %+v", ins)
	}
	// Every instance boots from a root volume at /dev/xvda.
	page, err := tc.DescribeInstances(Query{})
	if err != nil {
		t.Fatal(err)
	}
	bd := page.Items[0].BlockDevices
	if len(bd) != 1 || bd[0].Device != "/dev/xvda" || bd[0].State != AttachmentAttached || !bd[0].DeleteOnTermination {
		t.Fatalf("block devices %+v", bd)
	}
	if tc.store.size(bd[0].VolumeID) != 8*gib {
		t.Fatal("root volume has no bytes in the store")
	}
}

// TestOnlyViewedInstancesHaveNoLocalOne checks that a cloud whose instances
// all have views (the nodes of a multi-node cluster) gets no local instance:
// the first would otherwise be played twice, through the store's own link
// directory and through its view.
func TestOnlyViewedInstancesHaveNoLocalOne(t *testing.T) {
	cfg := Config{Store: newFakeStore(), Instances: []InstanceSpec{
		{PrivateIP: "10.89.0.11", View: &disks.View{LinkDir: "/x/1"}},
		{PrivateIP: "10.89.0.12", View: &disks.View{LinkDir: "/x/2"}},
	}}
	got, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for i, spec := range got.Instances {
		if spec.Local {
			t.Errorf("instance %d is local", i)
		}
	}
}
