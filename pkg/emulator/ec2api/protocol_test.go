package ec2api_test

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/ec2api"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

// post sends a raw EC2 Query request and returns the status and body.
func post(t *testing.T, endpoint string, form url.Values) (int, string) {
	t.Helper()
	resp, err := http.PostForm(endpoint, form)
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

// ec2Error is EC2's error envelope.
type ec2Error struct {
	XMLName xml.Name `xml:"Response"`
	Code    string   `xml:"Errors>Error>Code"`
	Message string   `xml:"Errors>Error>Message"`
	ID      string   `xml:"RequestID"`
}

func TestProtocol(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{})
	tests := []struct {
		name       string
		form       url.Values
		wantStatus int
		wantCode   string
	}{
		{name: "unknown action", form: url.Values{"Action": {"RunInstances"}, "Version": {"2016-11-15"}}, wantStatus: 400, wantCode: "InvalidAction"},
		{name: "no action", form: url.Values{"Version": {"2016-11-15"}}, wantStatus: 400, wantCode: "MissingAction"},
		{name: "bad integer", form: url.Values{"Action": {"CreateVolume"}, "AvailabilityZone": {"us-east-1a"}, "Size": {"ten"}}, wantStatus: 400, wantCode: "InvalidParameterValue"},
		{name: "bad boolean", form: url.Values{"Action": {"DescribeVolumes"}, "DryRun": {"maybe"}}, wantStatus: 400, wantCode: "InvalidParameterValue"},
		{name: "missing volume ID", form: url.Values{"Action": {"DeleteVolume"}}, wantStatus: 400, wantCode: "MissingParameter"},
		{name: "dry run of a read", form: url.Values{"Action": {"DescribeVolumes"}, "DryRun": {"true"}}, wantStatus: 412, wantCode: "DryRunOperation"},
		{name: "filter without a name", form: url.Values{"Action": {"DescribeVolumes"}, "Filter.1.Value.1": {"x"}}, wantStatus: 400, wantCode: "InvalidParameterValue"},
		{name: "tag without a key", form: url.Values{"Action": {"CreateTags"}, "ResourceId.1": {"vol-0123456789abcdef0"}, "Tag.1.Value": {"x"}}, wantStatus: 400, wantCode: "MissingParameter"},
		{name: "success", form: url.Values{"Action": {"DescribeAvailabilityZones"}, "Version": {"2016-11-15"}}, wantStatus: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(t, env.EC2URL, tc.form)
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tc.wantStatus, body)
			}
			if tc.wantCode == "" {
				if !strings.Contains(body, `<DescribeAvailabilityZonesResponse xmlns="`+ec2api.Namespace+`">`) || !strings.Contains(body, "<requestId>") {
					t.Fatalf("success body %s", body)
				}
				return
			}
			var e ec2Error
			if err := xml.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("error body %q: %v", body, err)
			}
			if e.Code != tc.wantCode || e.Message == "" || len(e.ID) != 36 {
				t.Fatalf("error %+v, want code %s", e, tc.wantCode)
			}
		})
	}
}

func TestQueryStringRequests(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{})
	resp, err := http.Get(env.EC2URL + "/?Action=DescribeInstances&Version=2016-11-15")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), env.LocalInstance().ID) {
		t.Fatalf("GET request: %d %s", resp.StatusCode, body)
	}
}

func TestActionsAreComplete(t *testing.T) {
	want := []string{"CreateVolume", "DeleteVolume", "DescribeVolumes", "AttachVolume", "DetachVolume", "ModifyVolume",
		"DescribeVolumesModifications", "DescribeVolumeStatus", "CopyVolumes", "CreateSnapshot", "DeleteSnapshot",
		"DescribeSnapshots", "CreateTags", "DeleteTags", "DescribeTags", "DescribeInstances", "DescribeInstanceTypes",
		"DescribeAvailabilityZones", "DescribeInstanceStatus", "StopInstances", "StartInstances", "TerminateInstances"}
	got := map[string]bool{}
	for _, a := range ec2api.Actions() {
		got[a] = true
	}
	if len(got) != len(want) {
		t.Fatalf("%d actions, want %d", len(got), len(want))
	}
	for _, a := range want {
		if !got[a] {
			t.Errorf("action %s missing", a)
		}
	}
}
