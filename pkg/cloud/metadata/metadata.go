// Package metadata tells a node plugin which instance it runs on: its ID,
// type, region, zone and how many attachment slots are already taken. It
// needs no cloud credentials: the sources are the instance metadata service
// (IMDSv2) and, when that is unreachable, the Kubernetes Node object.
package metadata

// Instance is what a node learns about itself.
type Instance struct {
	// ID is the EC2 instance ID (i-…); it is the CSI node ID.
	ID string
	// Type is the instance type (e.g. m5.large); it decides the attachment limit.
	Type string
	// Region is the AWS region (e.g. us-east-1).
	Region string
	// Zone is the availability zone name (e.g. us-east-1a).
	Zone string
	// ZoneID is the availability zone ID (e.g. use1-az1); empty when the source does not know it.
	ZoneID string
	// NetworkInterfaces is the number of network interfaces attached; on
	// instance types whose attachment slots are shared, each one takes a slot.
	NetworkInterfaces int
	// BlockDeviceMappings maps the launch-time mapping names (root, ebs1, …) to
	// device names; they take attachment slots the driver cannot use.
	BlockDeviceMappings map[string]string
}
