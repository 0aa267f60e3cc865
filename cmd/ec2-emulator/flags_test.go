package main

import (
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func parse(t *testing.T, args ...string) (*options, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := registerFlags(fs)
	return o, fs.Parse(args)
}

func TestInstanceFlag(t *testing.T) {
	tests := []struct {
		value   string
		want    model.InstanceSpec
		wantErr bool
	}{
		{value: "id=i-0123456789abcdef0,type=m5.large,zone=us-east-1b,local", want: model.InstanceSpec{ID: "i-0123456789abcdef0", Type: "m5.large", Zone: "us-east-1b", Local: true}},
		{value: "type=t3.medium,enis=3,tag:Name=node-2", want: model.InstanceSpec{Type: "t3.medium", NetworkInterfaces: 3, Tags: map[string]string{"Name": "node-2"}}},
		{value: "id=i-0000000000000001a,ip=10.89.0.11,links=/run/w1/dev/by-id,devices-cgroup=/sys/fs/cgroup/devices/w1", want: model.InstanceSpec{
			ID: "i-0000000000000001a", PrivateIP: "10.89.0.11", View: &disks.View{LinkDir: "/run/w1/dev/by-id", DevicesCgroup: "/sys/fs/cgroup/devices/w1"}}},
		{value: "links=/run/w2/dev/by-id", want: model.InstanceSpec{View: &disks.View{LinkDir: "/run/w2/dev/by-id"}}},
		{value: "", want: model.InstanceSpec{}},
		{value: "ip", wantErr: true},
		{value: "enis=0", wantErr: true},
		{value: "colour=red", wantErr: true},
		{value: "local=yes", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			var f instanceFlags
			err := f.Set(tc.value)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Set(%q) = %v", tc.value, err)
			}
			if err == nil && !reflect.DeepEqual(f.specs[0], tc.want) {
				t.Fatalf("Set(%q) = %+v, want %+v", tc.value, f.specs[0], tc.want)
			}
		})
	}
}

func TestErrorRuleFlag(t *testing.T) {
	tests := []struct {
		value   string
		want    faults.ErrorRule
		wantErr bool
	}{
		{value: "CreateVolume=InternalError:0.5", want: faults.ErrorRule{Action: "CreateVolume", Code: "InternalError", Probability: 0.5}},
		{value: "*=Unavailable:1:3", want: faults.ErrorRule{Action: "*", Code: "Unavailable", Probability: 1, Count: 3}},
		{value: "CreateVolume", wantErr: true},
		{value: "CreateVolume=InternalError", wantErr: true},
		{value: "CreateVolume=InternalError:often", wantErr: true},
		{value: "CreateVolume=InternalError:1:x", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			var f errorRuleFlags
			err := f.Set(tc.value)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Set(%q) = %v", tc.value, err)
			}
			if err == nil && f.rules[0] != tc.want {
				t.Fatalf("Set(%q) = %+v, want %+v", tc.value, f.rules[0], tc.want)
			}
		})
	}
}

func TestCommitFailAndAsyncFlags(t *testing.T) {
	var cf commitFailFlags
	if err := cf.Set("*=Stall:0.05:3"); err != nil || cf.rules[0] != (faults.CommitFailRule{Action: "*", Mode: "Stall", Probability: 0.05, Count: 3}) {
		t.Fatalf("--commit-then-fail: %+v, %v", cf.rules, err)
	}
	for _, bad := range []string{"CreateVolume", "CreateVolume=Reset", "=Reset:1", "CreateVolume=Reset:x"} {
		if err := cf.Set(bad); err == nil {
			t.Errorf("--commit-then-fail %q was accepted", bad)
		}
	}
	var af asyncFailureFlags
	if err := af.Set("CreateSnapshot:0.5"); err != nil || af.rules[0] != (faults.AsyncFailureRule{Action: "CreateSnapshot", Probability: 0.5}) {
		t.Fatalf("--async-failure: %+v, %v", af.rules, err)
	}
	for _, bad := range []string{"CreateSnapshot", ":1", "CreateSnapshot:1:x:y"} {
		if err := af.Set(bad); err == nil {
			t.Errorf("--async-failure %q was accepted", bad)
		}
	}
}

func TestCloudFaultFlags(t *testing.T) {
	o, err := parse(t, "--commit-then-fail", "*=InternalError:0.05", "--stale-reads", "2s:0.5", "--async-failure", "CreateVolume:1:1",
		"--unusable-kms-keys", "k1,k2", "--clock-skew", "-3m", "--client-token-ttl", "1h")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	f := cfg.Faults
	if len(f.CommitThenFail) != 1 || f.StaleReads != (faults.StaleReads{MaxLag: faults.Duration(2 * time.Second), Probability: 0.5}) ||
		len(f.AsyncFailures) != 1 || len(f.UnusableKMSKeys) != 2 || f.ClockSkew != faults.Duration(-3*time.Minute) || cfg.Cloud.ClientTokenTTL != time.Hour {
		t.Fatalf("faults %+v, token lifetime %v", f, cfg.Cloud.ClientTokenTTL)
	}
	o, _ = parse(t, "--stale-reads", "3s")
	if cfg, err := o.config(); err != nil || cfg.Faults.StaleReads.Probability != 1 {
		t.Fatalf("--stale-reads without a probability: %+v, %v", cfg.Faults.StaleReads, err)
	}
	for _, bad := range []string{"soon", "2s:often", "0s", "2s:2"} {
		o, _ := parse(t, "--stale-reads", bad)
		if _, err := o.config(); err == nil {
			t.Errorf("--stale-reads %q was accepted", bad)
		}
	}
}

func TestConfigFromFlags(t *testing.T) {
	dir := t.TempDir()
	instances := filepath.Join(dir, "instances.json")
	if err := os.WriteFile(instances, []byte(`[{"id":"i-0aaaaaaaaaaaaaaa1","type":"m7i.large","zone":"eu-west-1b"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	faultsFile := filepath.Join(dir, "faults.json")
	if err := os.WriteFile(faultsFile, []byte(`{"latency":{"*":"5ms"},"unauthorized":["DeleteVolume"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parse(t, "--no-devices", "--region=eu-west-1", "--zones=eu-west-1a=euw1-az3,eu-west-1b=euw1-az1",
		"--instance=type=m5.large,local", "--instances-file="+instances, "--attach-latency=0s",
		"--faults-file="+faultsFile, "--action-latency=CreateVolume=1s", "--throttle", "--inject-error=*=Unavailable:0.1",
		"--unauthorized=AttachVolume", "--unsupported=DescribeVolumeStatus,CopyVolumes", "--eventual-consistency=2s", "--stuck-attach=vol-0123456789abcdef0", "--stuck-attach-next=2", "--fault-seed=9")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Devices || cfg.Cloud.Region != "eu-west-1" || len(cfg.Cloud.Zones) != 2 || cfg.Cloud.Zones[0].ID != "euw1-az3" {
		t.Fatalf("cloud %+v", cfg.Cloud)
	}
	if len(cfg.Cloud.Instances) != 2 || !cfg.Cloud.Instances[0].Local || cfg.Cloud.Instances[1].Type != "m7i.large" {
		t.Fatalf("instances %+v", cfg.Cloud.Instances)
	}
	if cfg.Cloud.Latencies.Attach != 0 || cfg.Cloud.Latencies.VolumeCreate != model.DefaultLatencies().VolumeCreate {
		t.Fatalf("latencies %+v", cfg.Cloud.Latencies)
	}
	f := cfg.Faults
	if f.Latency["*"] != faults.Duration(5*time.Millisecond) || f.Latency["CreateVolume"] != faults.Duration(time.Second) ||
		!f.Throttle.Enabled || len(f.Errors) != 1 || !reflect.DeepEqual(f.Unauthorized, []string{"DeleteVolume", "AttachVolume"}) ||
		!reflect.DeepEqual(f.Unsupported, []string{"DescribeVolumeStatus", "CopyVolumes"}) ||
		f.EventualConsistency != faults.Duration(2*time.Second) || f.StuckAttach.Next != 2 || len(f.StuckAttach.VolumeIDs) != 1 || f.Seed != 9 {
		t.Fatalf("faults %+v", f)
	}

	bad := []struct {
		args []string
		want string
	}{
		{args: []string{"--zones=nonsense"}, want: "--zones"},
		{args: []string{"--instances-file=" + filepath.Join(dir, "missing.json")}, want: "--instances-file"},
		{args: []string{"--faults-file=" + instances}, want: "--faults-file"},
		{args: []string{"--action-latency=CreateVolume"}, want: "--action-latency"},
		{args: []string{"--inject-error=*=Boom:1"}, want: "faults"},
	}
	for _, tc := range bad {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parse(t, tc.args...)
			if err == nil {
				_, err = o.config()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("config() = %v, want an error about %s", err, tc.want)
			}
		})
	}
}

// TestDefaults: with no flags every listener is on the loopback interface
// (the emulator accepts any credentials, so it must not be reachable from
// the network unless asked to be), devices are real, and the cloud is
// us-east-1 with the default instance left to the model.
func TestDefaults(t *testing.T) {
	o, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag, addr, port string
	}{
		{flag: "--listen", addr: o.listen, port: "8700"},
		{flag: "--imds-listen", addr: o.imdsListen, port: "8701"},
		{flag: "--admin-listen", addr: o.adminListen, port: "8702"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			host, port, err := net.SplitHostPort(tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() || port != tc.port {
				t.Errorf("%s defaults to %s, want a loopback address on port %s", tc.flag, tc.addr, tc.port)
			}
		})
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Devices || cfg.LinkDir != "/dev/disk/by-id" || cfg.Cloud.DataDir != "/var/lib/ec2-emulator" {
		t.Errorf("devices %v, link dir %q, data dir %q", cfg.Devices, cfg.LinkDir, cfg.Cloud.DataDir)
	}
	if cfg.Cloud.Region != "us-east-1" || cfg.Cloud.Zones != nil || cfg.Cloud.Instances != nil {
		t.Errorf("cloud %+v: want us-east-1 with the model's default zones and instance", cfg.Cloud)
	}
}

func TestQuotaFlags(t *testing.T) {
	tests := []struct {
		args    []string
		want    model.Quotas
		wantErr string
	}{
		{args: nil, want: model.Quotas{StorageTiB: map[string]int64{}, Snapshots: model.DefaultSnapshotQuota}},
		{args: []string{"--quota-storage-tib=gp3=1, io2=2,st1=-1", "--quota-snapshots=10"},
			want: model.Quotas{StorageTiB: map[string]int64{"gp3": 1, "io2": 2, "st1": -1}, Snapshots: 10}},
		{args: []string{"--quota-snapshots=-1"}, want: model.Quotas{StorageTiB: map[string]int64{}, Snapshots: -1}},
		{args: []string{"--quota-storage-tib=gp9=1"}, wantErr: "unknown volume type"},
		{args: []string{"--quota-storage-tib=gp3"}, wantErr: "want type=TiB"},
		{args: []string{"--quota-storage-tib=gp3=lots"}, wantErr: "want type=TiB"},
		{args: []string{"--quota-snapshots=0"}, wantErr: "--quota-snapshots"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parse(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := o.config()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("config() = %v, want an error about %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Cloud.Quotas, tc.want) {
				t.Fatalf("quotas %+v, want %+v", cfg.Cloud.Quotas, tc.want)
			}
		})
	}
}

// TestLatencyProfileFlags checks --latency-profile and the latency flags
// that change one of its medians.
func TestLatencyProfileFlags(t *testing.T) {
	ebs := model.EBSLatencies()
	withAttach := model.EBSLatencies()
	withAttach.Attach = time.Second
	tests := []struct {
		name string
		args []string
		want model.Latencies
	}{
		{name: "default", want: model.DefaultLatencies()},
		{name: "ebs", args: []string{"--latency-profile=ebs"}, want: ebs},
		{name: "ebs with another attach median", args: []string{"--latency-profile=ebs", "--attach-latency=1s"}, want: withAttach},
		{name: "instant", args: []string{"--latency-profile=instant"}, want: model.Latencies{}},
		{name: "slow with instant deletes", args: []string{"--latency-profile=slow", "--volume-delete-latency=0s"},
			want: func() model.Latencies { l := model.SlowLatencies(); l.VolumeDelete = 0; return l }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(t, append([]string{"--no-devices", "--latency-seed=3"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := o.config()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Cloud.Latencies, tc.want) || cfg.Cloud.LatencySeed != 3 {
				t.Fatalf("latencies %+v (seed %d), want %+v", cfg.Cloud.Latencies, cfg.Cloud.LatencySeed, tc.want)
			}
		})
	}
	o, err := parse(t, "--no-devices", "--latency-profile=warp")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.config(); err == nil || !strings.Contains(err.Error(), "ebs, fixed, instant, slow") {
		t.Fatalf("an unknown profile: %v", err)
	}
}
