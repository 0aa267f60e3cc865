package emulatortest_test

import (
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestIMDSDescribesTheLocalInstance(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{
		Instances:        []model.InstanceSpec{{Type: "c5.large"}, {Type: "m7i.large", Zone: "us-east-1c", Local: true, NetworkInterfaces: 2}},
		RequireIMDSToken: true,
	})
	client := imds.New(imds.Options{Endpoint: env.IMDSURL})
	doc, err := client.GetInstanceIdentityDocument(t.Context(), &imds.GetInstanceIdentityDocumentInput{})
	if err != nil {
		t.Fatal(err)
	}
	local := env.LocalInstance()
	d := doc.InstanceIdentityDocument
	if d.InstanceID != local.ID || d.InstanceType != "m7i.large" || d.AvailabilityZone != "us-east-1c" || d.Region != "us-east-1" ||
		d.AccountID != env.Cloud().AccountID() || d.PrivateIP != local.NetworkInterfaces[0].PrivateIPs[0] {
		t.Fatalf("identity document %+v, local instance %+v", d, local)
	}
	for _, tc := range []struct{ path, want string }{
		{"placement/availability-zone-id", "use1-az4"},
		{"block-device-mapping/root", "/dev/xvda"},
	} {
		out, err := client.GetMetadata(t.Context(), &imds.GetMetadataInput{Path: tc.path})
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		b, err := io.ReadAll(out.Content)
		out.Content.Close()
		if err != nil || string(b) != tc.want {
			t.Fatalf("%s = %q (%v), want %q", tc.path, b, err, tc.want)
		}
	}
}
