package cloud

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"
)

// AvailabilityZones lists the region's available zones, sorted by name. The
// list is cached for ZoneCacheTTL: zones change about never, and
// CreateVolume asks for them whenever a volume comes without a zone.
func (c *ec2Cloud) AvailabilityZones(ctx context.Context) ([]Zone, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	zones, err := c.zones.get(ctx, func(ctx context.Context) ([]Zone, error) {
		out, err := c.ec2.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{},
			c.retry.use(opDescribeAvailabilityZones))
		if err != nil {
			return nil, classify(opDescribeAvailabilityZones, err)
		}
		var zones []Zone
		for _, z := range out.AvailabilityZones {
			if z.State == types.AvailabilityZoneStateAvailable {
				zones = append(zones, Zone{Name: aws.ToString(z.ZoneName), ID: aws.ToString(z.ZoneId)})
			}
		}
		slices.SortFunc(zones, func(a, b Zone) int { return strings.Compare(a.Name, b.Name) })
		return zones, nil
	})
	return slices.Clone(zones), err
}

// GetInstance returns an instance's type, zone and attachments; concurrent
// lookups share a call.
func (c *ec2Cloud) GetInstance(ctx context.Context, instanceID string) (*Instance, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	in, err := c.describeInstance(ctx, instanceID)
	if err != nil {
		return nil, err
	}
	return toInstance(in), nil
}

// HealthCheck asks EC2 for a dry run of DescribeAvailabilityZones: it sends
// one request, changes nothing, and fails exactly when the endpoint cannot
// be reached or the credentials are refused. A success is reused for
// HealthCheckInterval, so a liveness probe every few seconds costs EC2 one
// request a minute; a failure is not cached.
func (c *ec2Cloud) HealthCheck(ctx context.Context) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	_, err := c.health.get(ctx, func(ctx context.Context) (struct{}, error) {
		_, err := c.ec2.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{DryRun: aws.Bool(true)},
			func(o *ec2.Options) { o.Retryer = aws.NopRetryer{} })
		if err == nil || errorCode(err) == codeDryRunOperation {
			return struct{}{}, nil
		}
		err = classify(opDescribeAvailabilityZones, err)
		klog.V(2).InfoS("Cloud health check failed", "err", err)
		return struct{}{}, err
	})
	return err
}

// UpdateTags sets and removes tags on a volume or snapshot.
func (c *ec2Cloud) UpdateTags(ctx context.Context, resourceID string, set map[string]string, remove []string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if len(set) > 0 {
		klog.V(4).InfoS("Setting tags", "resourceID", resourceID, "keys", slices.Sorted(maps.Keys(set)))
		_, err := c.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{resourceID}, Tags: ec2Tags(set)},
			c.retry.use(opCreateTags))
		if err != nil {
			return classify(opCreateTags, err)
		}
	}
	if len(remove) > 0 {
		klog.V(4).InfoS("Removing tags", "resourceID", resourceID, "keys", remove)
		tags := make([]types.Tag, 0, len(remove))
		for _, k := range remove {
			tags = append(tags, types.Tag{Key: aws.String(k)})
		}
		_, err := c.ec2.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{resourceID}, Tags: tags},
			c.retry.use(opDeleteTags))
		if err != nil {
			return classify(opDeleteTags, err)
		}
	}
	return nil
}
