package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// call sends one admin request and returns the status and body.
func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestAdminAPI(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{Faults: faults.Config{StuckAttach: faults.StuckAttach{Next: 1}}})
	client := env.EC2Client()
	vol, err := client.CreateVolume(t.Context(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(env.Zone()), Size: aws.Int32(3)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.AttachVolume(t.Context(), &ec2.AttachVolumeInput{VolumeId: vol.VolumeId, InstanceId: aws.String(env.LocalInstance().ID), Device: aws.String("/dev/sdf")}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		check      func(t *testing.T, body string)
	}{
		{name: "health", method: "GET", path: "/healthz", wantStatus: 200},
		{name: "volumes", method: "GET", path: "/volumes", wantStatus: 200, check: func(t *testing.T, body string) {
			var vols []model.Volume
			if err := json.Unmarshal([]byte(body), &vols); err != nil {
				t.Fatal(err)
			}
			if len(vols) != 2 || !strings.Contains(body, aws.ToString(vol.VolumeId)) {
				t.Fatalf("volumes %s", body)
			}
		}},
		{name: "instances", method: "GET", path: "/instances", wantStatus: 200, check: func(t *testing.T, body string) {
			if !strings.Contains(body, env.LocalInstance().ID) {
				t.Fatalf("instances %s", body)
			}
		}},
		{name: "stop an instance", method: "PUT", path: "/instances/" + env.LocalInstance().ID + "/state", body: `{"state":"stopped"}`, wantStatus: 200, check: func(t *testing.T, body string) {
			checkInstanceState(t, client, env.LocalInstance().ID, "stopped", 80)
		}},
		{name: "start it again", method: "PUT", path: "/instances/" + env.LocalInstance().ID + "/state", body: `{"state":"running"}`, wantStatus: 200, check: func(t *testing.T, body string) {
			checkInstanceState(t, client, env.LocalInstance().ID, "running", 16)
		}},
		{name: "state of an unknown instance", method: "PUT", path: "/instances/i-0000000000000dead/state", body: `{"state":"stopped"}`, wantStatus: 404},
		{name: "an unknown state", method: "PUT", path: "/instances/" + env.LocalInstance().ID + "/state", body: `{"state":"terminated"}`, wantStatus: 400},
		{name: "hang a guest", method: "PUT", path: "/instances/" + env.LocalInstance().ID + "/status", body: `{"impaired":true}`, wantStatus: 200, check: func(t *testing.T, body string) {
			checkInstanceStatus(t, client, env.LocalInstance().ID, types.SummaryStatusImpaired)
		}},
		{name: "heal it", method: "PUT", path: "/instances/" + env.LocalInstance().ID + "/status", body: `{"impaired":false}`, wantStatus: 200, check: func(t *testing.T, body string) {
			checkInstanceStatus(t, client, env.LocalInstance().ID, types.SummaryStatusOk)
		}},
		{name: "status of an unknown instance", method: "PUT", path: "/instances/i-0000000000000dead/status", body: `{"impaired":true}`, wantStatus: 404},
		{name: "audit", method: "GET", path: "/audit", wantStatus: 200, check: func(t *testing.T, body string) {
			if !strings.Contains(body, `"sharedVolumes": {}`) {
				t.Fatalf("audit %s, want no volume attached to several instances", body)
			}
		}},
		{name: "patch cloud faults", method: "PATCH", path: "/faults", body: `{"clockSkew":"-3m","staleReads":{"maxLag":"2s","probability":0.5},"commitThenFail":[{"action":"*","mode":"Reset","probability":0.05}]}`, wantStatus: 200, check: func(t *testing.T, body string) {
			c := env.Faults().Config()
			if time.Duration(c.ClockSkew) != -3*time.Minute || env.Faults().StaleWindow() != 2*time.Second || len(c.CommitThenFail) != 1 {
				t.Fatalf("after patch %s", body)
			}
			if err := env.Faults().Set(faults.Config{}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "snapshots", method: "GET", path: "/snapshots", wantStatus: 200, check: func(t *testing.T, body string) {
			if strings.TrimSpace(body) != "[]" {
				t.Fatalf("snapshots %s", body)
			}
		}},
		{name: "metrics count the calls", method: "GET", path: "/metrics", wantStatus: 200, check: func(t *testing.T, body string) {
			for _, want := range []string{
				`ec2_emulator_api_requests_total{action="CreateVolume",code="Success"} 1`,
				`ec2_emulator_api_request_duration_seconds_count{action="AttachVolume"} 1`,
			} {
				if !strings.Contains(body, want) {
					t.Fatalf("metrics lack %q", want)
				}
			}
		}},
		{name: "release stuck attachments", method: "POST", path: "/faults/release-stuck-attachments", wantStatus: 200, check: func(t *testing.T, body string) {
			if !strings.Contains(body, `"released": 1`) {
				t.Fatalf("release answered %s", body)
			}
		}},
		{name: "patch faults", method: "PATCH", path: "/faults", body: `{"eventualConsistency":"3s"}`, wantStatus: 200, check: func(t *testing.T, body string) {
			if env.Faults().Hide().String() != "3s" || !strings.Contains(body, `"eventualConsistency": "3s"`) {
				t.Fatalf("after patch %s", body)
			}
		}},
		{name: "read faults", method: "GET", path: "/faults", wantStatus: 200, check: func(t *testing.T, body string) {
			if !strings.Contains(body, `"eventualConsistency": "3s"`) {
				t.Fatalf("faults %s", body)
			}
		}},
		{name: "replace faults", method: "PUT", path: "/faults", body: `{"unauthorized":["DeleteVolume"]}`, wantStatus: 200, check: func(t *testing.T, body string) {
			c := env.Faults().Config()
			if c.EventualConsistency != 0 || len(c.Unauthorized) != 1 {
				t.Fatalf("after replace %+v", c)
			}
		}},
		{name: "invalid faults", method: "PUT", path: "/faults", body: `{"errors":[{"action":"*","code":"Nope","probability":1}]}`, wantStatus: 400},
		{name: "malformed faults", method: "PATCH", path: "/faults", body: `{`, wantStatus: 400},
		{name: "read quotas", method: "GET", path: "/quotas", wantStatus: 200, check: func(t *testing.T, body string) {
			var q model.Quotas
			if err := json.Unmarshal([]byte(body), &q); err != nil {
				t.Fatal(err)
			}
			if q.StorageTiB["gp3"] != 50 || q.StorageTiB["io2"] != 20 || q.Snapshots != 100000 {
				t.Fatalf("quotas %s", body)
			}
		}},
		{name: "patch quotas", method: "PATCH", path: "/quotas", body: `{"storageTiB":{"gp3":1}}`, wantStatus: 200, check: func(t *testing.T, body string) {
			q := env.Cloud().Quotas()
			if q.StorageTiB["gp3"] != 1 || q.StorageTiB["io2"] != 20 || !strings.Contains(body, `"gp3": 1,`) {
				t.Fatalf("after patch %+v, answered %s", q, body)
			}
		}},
		{name: "patched quota applies to the next request", method: "GET", path: "/healthz", wantStatus: 200, check: func(t *testing.T, _ string) {
			_, err := client.CreateVolume(t.Context(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(env.Zone()), Size: aws.Int32(1024), VolumeType: "gp3"})
			if err == nil || !strings.Contains(err.Error(), "VolumeLimitExceeded") {
				t.Fatalf("CreateVolume over the patched quota: %v", err)
			}
		}},
		{name: "replace quotas", method: "PUT", path: "/quotas", body: `{"snapshots":3}`, wantStatus: 200, check: func(t *testing.T, _ string) {
			q := env.Cloud().Quotas()
			if q.StorageTiB["gp3"] != 50 || q.Snapshots != 3 {
				t.Fatalf("after replace %+v", q)
			}
		}},
		{name: "quota of an unknown type", method: "PATCH", path: "/quotas", body: `{"storageTiB":{"gp9":1}}`, wantStatus: 400},
		{name: "malformed quotas", method: "PUT", path: "/quotas", body: `{`, wantStatus: 400},
		{name: "wrong method", method: "DELETE", path: "/volumes", wantStatus: 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := call(t, tc.method, env.AdminURL+tc.path, tc.body)
			if status != tc.wantStatus {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, status, body, tc.wantStatus)
			}
			if tc.check != nil {
				tc.check(t, body)
			}
		})
	}
}

// checkInstanceState checks what DescribeInstances says of an instance's
// state, and that the instance-state-name filter finds it by that state.
func checkInstanceState(t *testing.T, client *ec2.Client, id, name string, code int32) {
	t.Helper()
	out, err := client.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{
		Filters: []types.Filter{{Name: aws.String("instance-state-name"), Values: []string{name}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			if aws.ToString(in.InstanceId) == id {
				if string(in.State.Name) != name || aws.ToInt32(in.State.Code) != code {
					t.Fatalf("instance %s is %s (%d), want %s (%d)", id, in.State.Name, aws.ToInt32(in.State.Code), name, code)
				}
				return
			}
		}
	}
	t.Fatalf("DescribeInstances with instance-state-name=%s does not list %s", name, id)
}

// checkInstanceStatus checks the instance status check DescribeInstanceStatus
// reports for an instance.
func checkInstanceStatus(t *testing.T, client *ec2.Client, id string, want types.SummaryStatus) {
	t.Helper()
	out, err := client.DescribeInstanceStatus(t.Context(), &ec2.DescribeInstanceStatusInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.InstanceStatuses) != 1 || out.InstanceStatuses[0].InstanceStatus.Status != want {
		t.Fatalf("DescribeInstanceStatus(%s) = %+v, want instance status %s", id, out.InstanceStatuses, want)
	}
}
