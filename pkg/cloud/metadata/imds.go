package metadata

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// imdsMaxAttempts is how often one IMDS request is tried. IMDS on a real
// instance answers in milliseconds; when it does not answer at all (no IMDS,
// hop limit, blocked by the CNI) more attempts only delay the fallback.
const imdsMaxAttempts = 2

// The IMDS metadata paths the source reads besides the identity document.
const (
	zoneIDPath              = "placement/availability-zone-id"
	macsPath                = "network/interfaces/macs"
	blockDeviceMappingsPath = "block-device-mapping"
)

// fromIMDS reads the instance's identity document, zone ID, network
// interfaces and launch-time block device mappings from IMDSv2. It never
// falls back to IMDSv1: an instance that requires tokens must not be probed
// without one, and a token that cannot be fetched is the hop-limit symptom
// the error should name.
func fromIMDS(ctx context.Context, opts Options) (*Instance, error) {
	client := imds.New(imds.Options{
		Endpoint:       opts.IMDSEndpoint, // empty: the SDK reads AWS_EC2_METADATA_SERVICE_ENDPOINT
		EnableFallback: aws.FalseTernary,
		Retryer:        retry.AddWithMaxAttempts(retry.NewStandard(), imdsMaxAttempts),
	})
	doc, err := client.GetInstanceIdentityDocument(ctx, &imds.GetInstanceIdentityDocumentInput{})
	if err != nil {
		return nil, fmt.Errorf("read the instance identity document: %w%s", err, imdsHint(err))
	}
	in := &Instance{
		ID:     doc.InstanceID,
		Type:   doc.InstanceType,
		Region: doc.Region,
		Zone:   doc.AvailabilityZone,
	}
	for field, value := range map[string]string{
		"instanceId": in.ID, "instanceType": in.Type, "region": in.Region, "availabilityZone": in.Zone,
	} {
		if value == "" {
			return nil, fmt.Errorf("the instance identity document has no %s", field)
		}
	}
	// Zone IDs are newer than the rest; an EC2-compatible cloud may not
	// serve them, and an empty ZoneID only disables provisioning by zone ID.
	if in.ZoneID, _, err = readOptional(ctx, client, zoneIDPath); err != nil {
		return nil, err
	}
	// Every instance has its primary interface, listed or not.
	macs, _, err := readOptional(ctx, client, macsPath)
	if err != nil {
		return nil, err
	}
	in.NetworkInterfaces = max(1, len(lines(macs)))
	if in.BlockDeviceMappings, err = readBlockDeviceMappings(ctx, client); err != nil {
		return nil, err
	}
	return in, nil
}

// readBlockDeviceMappings reads the launch-time mapping names and the device
// each one names; an instance without the listing has none.
func readBlockDeviceMappings(ctx context.Context, client *imds.Client) (map[string]string, error) {
	listing, found, err := readOptional(ctx, client, blockDeviceMappingsPath)
	if err != nil || !found {
		return nil, err
	}
	mappings := make(map[string]string)
	for _, name := range lines(listing) {
		name = strings.TrimSuffix(name, "/")
		device, err := read(ctx, client, blockDeviceMappingsPath+"/"+name)
		if err != nil {
			return nil, err
		}
		mappings[name] = strings.TrimSpace(device)
	}
	return mappings, nil
}

// readOptional reads a metadata path that an instance may lack; found is
// false when IMDS answers 404.
func readOptional(ctx context.Context, client *imds.Client, path string) (value string, found bool, err error) {
	value, err = read(ctx, client, path)
	if httpStatus(err) == http.StatusNotFound {
		return "", false, nil
	}
	return strings.TrimSpace(value), err == nil, err
}

// read returns the content of one metadata path.
func read(ctx context.Context, client *imds.Client, path string) (string, error) {
	out, err := client.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", fmt.Errorf("read %s: %w%s", path, err, imdsHint(err))
	}
	defer out.Content.Close()
	b, err := io.ReadAll(out.Content)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return string(b), nil
}

// httpStatus returns the HTTP status of a failed IMDS request, or 0 when the
// request got no HTTP answer.
func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// imdsHint adds the usual cause to an error that got no HTTP answer, the
// most common IMDS complaint from pods.
func imdsHint(err error) string {
	if httpStatus(err) != 0 || errors.Is(err, context.Canceled) {
		return ""
	}
	return " (IMDS unreachable from this pod: on EC2 check that the instance's metadata " +
		"hop limit is at least 2 and that the network policy or CNI allows 169.254.169.254)"
}

// lines splits an IMDS listing into its non-empty lines.
func lines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
