package metadata

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/pkg/kubeclient"
)

// The well-known Node labels the Kubernetes source reads. The cloud
// controller manager (or the kubelet) sets them from the same EC2 data IMDS
// serves.
const (
	labelInstanceType = corev1.LabelInstanceTypeStable // node.kubernetes.io/instance-type
	labelZone         = corev1.LabelTopologyZone       // topology.kubernetes.io/zone
	labelRegion       = corev1.LabelTopologyRegion     // topology.kubernetes.io/region
	labelZoneID       = "topology.k8s.aws/zone-id"
)

// providerIDPrefix starts the providerID of every EC2 node:
// aws:///<zone>/<instance-id>.
const providerIDPrefix = "aws://"

// instanceIDPattern is what an EC2 instance ID looks like. EC2 uses
// lower-case hex; EC2-compatible clouds use other alphanumerics.
var instanceIDPattern = regexp.MustCompile(`^i-[0-9A-Za-z]+$`)

// regionOfZone captures the region of a plain availability zone name
// (us-east-1a → us-east-1). Local and Wavelength zone names
// (us-west-2-lax-1a) do not match, because their region cannot be read off
// them reliably.
var regionOfZone = regexp.MustCompile(`^([a-z]{2}(?:-[a-z]+)+-[0-9]+)[a-z]$`)

// fromKubernetes reads the instance from this node's Node object: the
// instance ID (and zone) from spec.providerID, the rest from labels.
func fromKubernetes(ctx context.Context, opts Options) (*Instance, error) {
	name := opts.NodeName
	if name == "" {
		name = os.Getenv(NodeNameEnv)
	}
	if name == "" {
		return nil, fmt.Errorf("node name unknown: set %s from the downward API (spec.nodeName)", NodeNameEnv)
	}
	client := opts.KubeClient
	if client == nil {
		var err error
		if client, err = kubeclient.InCluster(); err != nil {
			return nil, err
		}
	}
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %q: %w", name, err)
	}
	return instanceFromNode(node)
}

// instanceFromNode interprets a Node object. The zone comes from the zone
// label or, without it, from the providerID; when both are present they must
// agree, because a wrong zone would place volumes where this node cannot
// attach them.
func instanceFromNode(node *corev1.Node) (*Instance, error) {
	providerZone, id, err := ParseProviderID(node.Spec.ProviderID)
	if err != nil {
		return nil, fmt.Errorf("node %q: %w", node.Name, err)
	}
	labels := node.Labels
	in := &Instance{
		ID:                id,
		Type:              labels[labelInstanceType],
		Region:            labels[labelRegion],
		Zone:              labels[labelZone],
		ZoneID:            labels[labelZoneID],
		NetworkInterfaces: 1,
	}
	switch {
	case in.Zone == "":
		in.Zone = providerZone
	case providerZone != "" && providerZone != in.Zone:
		return nil, fmt.Errorf("node %q: label %s=%s disagrees with the zone %s in providerID %q",
			node.Name, labelZone, in.Zone, providerZone, node.Spec.ProviderID)
	}
	if in.Region == "" {
		if m := regionOfZone.FindStringSubmatch(in.Zone); m != nil {
			in.Region = m[1]
		}
	}
	var missing []string
	if in.Type == "" {
		missing = append(missing, "label "+labelInstanceType)
	}
	if in.Zone == "" {
		missing = append(missing, "label "+labelZone+" (or a zone in spec.providerID)")
	}
	if in.Region == "" {
		missing = append(missing, "label "+labelRegion)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("node %q lacks %s", node.Name, strings.Join(missing, ", "))
	}
	return in, nil
}

// errBadProviderID is wrapped by every providerID parse error.
var errBadProviderID = errors.New("spec.providerID is not an EC2 provider ID (aws:///<zone>/<instance-id>)")

// ParseProviderID splits a Node's spec.providerID, aws:///<zone>/<instance-id>
// (the zone may be empty, as in aws:////<instance-id>, or left out, as in
// aws:///<instance-id>); the controller's node witness finds a Node's
// instance with it.
func ParseProviderID(providerID string) (zone, instanceID string, err error) {
	rest, ok := strings.CutPrefix(providerID, providerIDPrefix)
	if !ok {
		return "", "", fmt.Errorf("%q: %w", providerID, errBadProviderID)
	}
	var parts []string
	for p := range strings.SplitSeq(rest, "/") {
		if p != "" {
			parts = append(parts, p)
		}
	}
	switch len(parts) {
	case 1:
		instanceID = parts[0]
	case 2:
		zone, instanceID = parts[0], parts[1]
	default:
		return "", "", fmt.Errorf("%q: %w", providerID, errBadProviderID)
	}
	if !instanceIDPattern.MatchString(instanceID) {
		return "", "", fmt.Errorf("%q: %q is not an instance ID: %w", providerID, instanceID, errBadProviderID)
	}
	return zone, instanceID, nil
}
