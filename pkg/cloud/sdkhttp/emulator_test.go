package sdkhttp_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskplane/diskplane/pkg/cloud/sdkhttp"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// TestLargeResponsesFromANearbyEndpoint sends DescribeInstances, whose
// answer for a dozen instances is larger than the transport's read buffer,
// to an in-process emulator with retries off: every call must succeed at
// the first attempt. Without Wrap most runs under -race fail with "use of
// closed network connection".
func TestLargeResponsesFromANearbyEndpoint(t *testing.T) {
	instances := make([]model.InstanceSpec, 12)
	for i := range instances {
		instances[i] = model.InstanceSpec{Local: i == 0}
	}
	env := emulatortest.Start(t, emulatortest.Options{Instances: instances})
	client := ec2.New(ec2.Options{
		Region:       env.Region(),
		BaseEndpoint: aws.String(env.EC2URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
		Retryer:      aws.NopRetryer{},
		HTTPClient:   sdkhttp.Wrap(awshttp.NewBuildableClient()),
	})
	for i := range 300 {
		out, err := client.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if n := len(out.Reservations); n != len(instances) {
			t.Fatalf("call %d: %d reservations, want %d", i, n, len(instances))
		}
	}
}
