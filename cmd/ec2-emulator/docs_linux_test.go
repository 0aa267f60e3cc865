package main

import (
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// metricsDoc lists every metric the binaries expose (the process metrics
// it lists are Linux's).
var metricsDoc = filepath.Join("..", "..", "docs", "metrics.md")

// TestMetricsDocumented keeps docs/metrics.md in step with the metrics the
// emulator serves on its admin listener: it answers one EC2 request and
// one STS request (the labelled metrics appear with their first sample;
// the STS one is refused, and counted), gathers the registry
// the admin listener serves and checks each metric against the page, and
// each metric on the page against them.
func TestMetricsDocumented(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{})
	if _, err := env.EC2Client().DescribeVolumes(t.Context(), &ec2.DescribeVolumesInput{}); err != nil {
		t.Fatal(err)
	}
	stsClient := sts.New(sts.Options{Region: env.Region(), BaseEndpoint: aws.String(env.EC2URL)})
	if _, err := stsClient.AssumeRoleWithWebIdentity(t.Context(), &sts.AssumeRoleWithWebIdentityInput{
		RoleArn: aws.String("arn:aws:iam::123456789012:role/r"), RoleSessionName: aws.String("s1"), WebIdentityToken: aws.String("a.b.c"),
	}); err == nil {
		t.Fatal("STS accepted a token that is not one")
	}
	families, err := env.Emulator().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckMetricsDocumented(t, metricsDoc, []string{"ec2-emulator", "Go runtime and process"}, testutil.GatheredMetrics(families))
}
