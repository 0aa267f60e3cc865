package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// TestVolumeHealthAPI sets a volume's health through the admin API and sees
// DescribeVolumeStatus report it; bad documents and unknown volumes get
// their statuses, and a store that keeps state only cannot fail a device.
func TestVolumeHealthAPI(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{})
	client := env.EC2Client()
	out, err := client.CreateVolume(t.Context(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(env.Zone()), Size: aws.Int32(3)})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.VolumeId)
	health := env.AdminURL + "/volumes/" + id + "/health"

	if code, body := call(t, "GET", health, ""); code != http.StatusOK || strings.TrimSpace(body) != "{}" {
		t.Fatalf("GET health of a new volume = %d %s, want 200 {}", code, body)
	}
	doc := `{"status":"impaired","ioEnabled":"failed","events":[{"id":"evol-1","type":"potential-data-inconsistency","description":"Awaiting Action: Enable IO","notBefore":"2026-11-20T08:00:00Z"}],"actions":[{"code":"enable-volume-io","eventId":"evol-1"}]}`
	if code, body := call(t, "PUT", health, doc); code != http.StatusOK {
		t.Fatalf("PUT health = %d %s", code, body)
	}
	code, body := call(t, "GET", health, "")
	var got model.VolumeHealth
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil || got.Status != "impaired" || len(got.Events) != 1 {
		t.Fatalf("GET health = %d %s (%v)", code, body, err)
	}
	st, err := client.DescribeVolumeStatus(t.Context(), &ec2.DescribeVolumeStatusInput{VolumeIds: []string{id}})
	if err != nil || st.VolumeStatuses[0].VolumeStatus.Status != types.VolumeStatusInfoStatusImpaired || len(st.VolumeStatuses[0].Actions) != 1 {
		t.Fatalf("DescribeVolumeStatus after PUT: %+v, %v", st, err)
	}

	for _, tc := range []struct {
		name, method, url, body string
		want                    int
	}{
		{"value EC2 never reports", "PUT", health, `{"status":"sick"}`, http.StatusBadRequest},
		{"unknown field", "PUT", health, `{"state":"impaired"}`, http.StatusBadRequest},
		{"not JSON", "PUT", health, `impaired`, http.StatusBadRequest},
		{"unknown volume", "GET", env.AdminURL + "/volumes/vol-0123456789abcdef0/health", "", http.StatusNotFound},
		{"malformed volume ID", "PUT", env.AdminURL + "/volumes/disk-1/health", `{}`, http.StatusBadRequest},
		{"no device faults without devices", "PUT", env.AdminURL + "/volumes/" + id + "/device", `{"failIO":true}`, http.StatusNotImplemented},
	} {
		if code, body := call(t, tc.method, tc.url, tc.body); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
	if code, _ := call(t, "PUT", health, `{}`); code != http.StatusOK {
		t.Fatalf("PUT {} = %d", code)
	}
	if st, err := client.DescribeVolumeStatus(t.Context(), &ec2.DescribeVolumeStatusInput{VolumeIds: []string{id}}); err != nil ||
		st.VolumeStatuses[0].VolumeStatus.Status != types.VolumeStatusInfoStatusOk {
		t.Fatalf("after PUT {}: %+v, %v", st, err)
	}
}
