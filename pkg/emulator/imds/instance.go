// Package imds serves the EC2 instance metadata service (IMDS) for the
// instance the emulator's host plays, so that a node plugin's unmodified
// aws-sdk-go-v2 imds client (pointed at it with
// AWS_EC2_METADATA_SERVICE_ENDPOINT) learns its instance ID, type, zone,
// network interfaces and block-device mapping exactly as it would on EC2.
//
// It covers the IMDSv2 session-token protocol (and IMDSv1 unless tokens are
// required), the /latest/meta-data/ tree a node plugin reads, and the
// instance identity document. It does not serve IAM credentials, user data,
// tags, spot or maintenance events, signatures of the identity document
// (pkcs7, signature, rsa2048), dated API versions, or the PUT response hop
// limit (which on EC2 is enforced by the network, not by IMDS).
package imds

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// Instance is what IMDS knows about the instance it runs on. The handler asks
// for it on every request, so attachments and other changes the emulator's
// model makes show up at once. Empty optional fields leave their entries out,
// as EC2 does for data an instance does not have.
type Instance struct {
	// ID is the instance ID (i-…).
	ID string
	// Type is the instance type (e.g. m5.large).
	Type string
	// ImageID is the AMI the instance was launched from (ami-…); optional.
	ImageID string
	// AccountID is the owner's 12-digit account ID; it appears in the identity
	// document and as the interfaces' owner-id.
	AccountID string
	// Region is the region (e.g. us-east-1).
	Region string
	// AvailabilityZone is the zone name (e.g. us-east-1a).
	AvailabilityZone string
	// AvailabilityZoneID is the zone ID (e.g. use1-az1); optional.
	AvailabilityZoneID string
	// Architecture is the CPU architecture as EC2 names it (x86_64, arm64);
	// empty means x86_64.
	Architecture string
	// PendingTime is when the instance was launched; the identity document
	// carries it.
	PendingTime time.Time
	// NetworkInterfaces are the attached interfaces; the one with device
	// number 0 is the primary, whose MAC and first address are the instance's
	// mac and local-ipv4.
	NetworkInterfaces []NetworkInterface
	// BlockDeviceMappings maps the launch-time mapping names EC2 uses (ami,
	// root, ebs1, ebs2, …, ephemeral0) to device names (e.g. "/dev/xvda",
	// "sdb"). Like EC2, IMDS shows only the mapping the instance was launched
	// with, not volumes attached later.
	BlockDeviceMappings map[string]string
}

// NetworkInterface is one elastic network interface (ENI) of the instance.
type NetworkInterface struct {
	// MAC is the interface's MAC address, lower case (e.g. 0e:49:61:0f:c3:11);
	// IMDS indexes interfaces by it.
	MAC string
	// ID is the interface ID (eni-…).
	ID string
	// DeviceNumber is the attachment index; 0 is the primary interface.
	DeviceNumber int
	// PrivateIPv4s are the interface's private addresses, primary first.
	PrivateIPv4s []string
	// SubnetID is the subnet the interface lives in (subnet-…); optional.
	SubnetID string
	// VPCID is the VPC of that subnet (vpc-…); optional.
	VPCID string
}

// primaryInterface returns the interface with device number 0, or the first
// one when none has it.
func (in Instance) primaryInterface() (NetworkInterface, bool) {
	for _, ni := range in.NetworkInterfaces {
		if ni.DeviceNumber == 0 {
			return ni, true
		}
	}
	if len(in.NetworkInterfaces) > 0 {
		return in.NetworkInterfaces[0], true
	}
	return NetworkInterface{}, false
}

// privateIPv4 is the instance's primary private address, or "" without one.
func (in Instance) privateIPv4() string {
	if ni, ok := in.primaryInterface(); ok && len(ni.PrivateIPv4s) > 0 {
		return ni.PrivateIPv4s[0]
	}
	return ""
}

// identityDocumentVersion is the document format version EC2 reports.
const identityDocumentVersion = "2017-09-30"

// identityDocument is the instance identity document's shape. Fields EC2
// reports as null for a plain on-demand instance stay nil pointers so they
// render as null, and the fields are in the order EC2 prints them.
type identityDocument struct {
	AccountID               string    `json:"accountId"`
	Architecture            string    `json:"architecture"`
	AvailabilityZone        string    `json:"availabilityZone"`
	BillingProducts         *[]string `json:"billingProducts"`
	DevpayProductCodes      *[]string `json:"devpayProductCodes"`
	MarketplaceProductCodes *[]string `json:"marketplaceProductCodes"`
	ImageID                 string    `json:"imageId"`
	InstanceID              string    `json:"instanceId"`
	InstanceType            string    `json:"instanceType"`
	KernelID                *string   `json:"kernelId"`
	PendingTime             string    `json:"pendingTime"`
	PrivateIP               string    `json:"privateIp"`
	RamdiskID               *string   `json:"ramdiskId"`
	Region                  string    `json:"region"`
	Version                 string    `json:"version"`
}

// identityDocumentJSON renders the instance identity document, indented as
// EC2 serves it.
func (in Instance) identityDocumentJSON() (string, error) {
	arch := in.Architecture
	if arch == "" {
		arch = "x86_64"
	}
	doc := identityDocument{
		AccountID:        in.AccountID,
		Architecture:     arch,
		AvailabilityZone: in.AvailabilityZone,
		ImageID:          in.ImageID,
		InstanceID:       in.ID,
		InstanceType:     in.Type,
		PendingTime:      in.PendingTime.UTC().Format(time.RFC3339),
		PrivateIP:        in.privateIPv4(),
		Region:           in.Region,
		Version:          identityDocumentVersion,
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return "", fmt.Errorf("render instance identity document: %w", err)
	}
	return string(b), nil
}

// node is one entry of the metadata tree: a leaf with a value, or a
// directory with children.
type node struct {
	value    string
	children map[string]*node
}

func leaf(v string) *node { return &node{value: v} }

func dir() *node { return &node{children: map[string]*node{}} }

// set adds a leaf under the directory unless the value is empty: EC2 leaves
// out entries an instance has no data for.
func (n *node) set(name, value string) {
	if value != "" {
		n.children[name] = leaf(value)
	}
}

// isDir reports whether the node lists children rather than holding a value.
func (n *node) isDir() bool { return n.children != nil }

// listing renders a directory as EC2 does: one child per line, sorted,
// sub-directories with a trailing slash, no final newline.
func (n *node) listing() string {
	names := make([]string, 0, len(n.children))
	for name, child := range n.children {
		if child.isDir() {
			name += "/"
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, "\n")
}

// lookup walks a slash-separated path below n; empty segments (doubled or
// trailing slashes) are ignored, as EC2 does.
func (n *node) lookup(path string) (*node, bool) {
	cur := n
	for _, seg := range strings.Split(path, "/") {
		if seg == "" {
			continue
		}
		if !cur.isDir() {
			return nil, false
		}
		next, ok := cur.children[seg]
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

// tree builds the /latest/ tree for the instance: meta-data/ and dynamic/.
func (in Instance) tree() (*node, error) {
	ip := in.privateIPv4()
	hostname := model.PrivateDNSName(ip, in.Region)

	md := dir()
	md.set("ami-id", in.ImageID)
	md.set("ami-launch-index", "0")
	md.set("hostname", hostname)
	md.set("instance-id", in.ID)
	md.set("instance-life-cycle", "on-demand")
	md.set("instance-type", in.Type)
	md.set("local-hostname", hostname)
	md.set("local-ipv4", ip)
	if ni, ok := in.primaryInterface(); ok {
		md.set("mac", ni.MAC)
	}

	placement := dir()
	placement.set("availability-zone", in.AvailabilityZone)
	placement.set("availability-zone-id", in.AvailabilityZoneID)
	placement.set("region", in.Region)
	md.children["placement"] = placement

	services := dir()
	services.set("domain", "amazonaws.com")
	services.set("partition", "aws")
	md.children["services"] = services

	macs := dir()
	for _, ni := range in.NetworkInterfaces {
		macs.children[ni.MAC] = in.interfaceTree(ni)
	}
	interfaces := dir()
	interfaces.children["macs"] = macs
	network := dir()
	network.children["interfaces"] = interfaces
	md.children["network"] = network

	if len(in.BlockDeviceMappings) > 0 {
		bdm := dir()
		for name, device := range in.BlockDeviceMappings {
			bdm.set(name, device)
		}
		md.children["block-device-mapping"] = bdm
	}

	doc, err := in.identityDocumentJSON()
	if err != nil {
		return nil, err
	}
	identity := dir()
	identity.set("document", doc)
	dynamic := dir()
	dynamic.children["instance-identity"] = identity

	latest := dir()
	latest.children["meta-data"] = md
	latest.children["dynamic"] = dynamic
	return latest, nil
}

// interfaceTree renders one network/interfaces/macs/<mac>/ directory.
func (in Instance) interfaceTree(ni NetworkInterface) *node {
	d := dir()
	d.set("device-number", strconv.Itoa(ni.DeviceNumber))
	d.set("interface-id", ni.ID)
	if len(ni.PrivateIPv4s) > 0 {
		d.set("local-hostname", model.PrivateDNSName(ni.PrivateIPv4s[0], in.Region))
		d.set("local-ipv4s", strings.Join(ni.PrivateIPv4s, "\n"))
	}
	d.set("mac", ni.MAC)
	d.set("owner-id", in.AccountID)
	d.set("subnet-id", ni.SubnetID)
	d.set("vpc-id", ni.VPCID)
	return d
}
