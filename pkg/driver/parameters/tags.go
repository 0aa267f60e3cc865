package parameters

import (
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// EC2's limits on a tag, in characters.
const (
	maxTagKeyLength   = 128
	maxTagValueLength = 256
)

// Tag keys the driver sets on a volume from the provisioner's
// --extra-create-metadata, so an operator can find the claim a volume belongs
// to from the cloud console.
const (
	TagCreatedForPVCName      = "kubernetes.io/created-for/pvc/name"
	TagCreatedForPVCNamespace = "kubernetes.io/created-for/pvc/namespace"
	TagCreatedForPVName       = "kubernetes.io/created-for/pv/name"
)

// reservedTagPrefix is the prefix of every Kubernetes-owned tag key (cluster
// ownership, created-for); users cannot set such keys.
const reservedTagPrefix = "kubernetes.io/"

// clusterIDTagPrefix plus the --k8s-tag-cluster-id value is the tag key that
// marks a volume or snapshot as owned by that Kubernetes cluster.
const clusterIDTagPrefix = "kubernetes.io/cluster/"

// ClusterTagKey is the tag key that marks every volume and snapshot a driver
// with this name created (value "true"); IAM policies can match on it to
// limit the driver to its own resources.
func ClusterTagKey(driverName string) string { return driverName + "/cluster" }

// ClusterIDTagKey is the tag key (value "owned") that --k8s-tag-cluster-id
// adds to every volume and snapshot.
func ClusterIDTagKey(clusterID string) string { return clusterIDTagPrefix + clusterID }

// ParseTagList reads the --extra-tags flag: comma-separated key=value pairs
// (values may be empty; keys may not repeat). An empty string is no tags.
func ParseTagList(flagName, s string) (map[string]string, error) {
	tags := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return tags, nil
	}
	for _, pair := range strings.Split(s, ",") {
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, invalid(flagName, "%q is not key=value", pair)
		}
		key = strings.TrimSpace(key)
		if err := checkTagKeySyntax(flagName, key); err != nil {
			return nil, err
		}
		if err := checkTagValue(flagName, value); err != nil {
			return nil, err
		}
		if _, dup := tags[key]; dup {
			return nil, invalid(flagName, "tag %q is given twice", key)
		}
		tags[key] = value
	}
	return tags, nil
}

// checkTagKeySyntax enforces EC2's rules for a tag key.
func checkTagKeySyntax(param, key string) error {
	switch {
	case key == "":
		return invalid(param, "the tag key is empty")
	case !utf8.ValidString(key):
		return invalid(param, "the tag key is not valid UTF-8")
	case utf8.RuneCountInString(key) > maxTagKeyLength:
		return invalid(param, "the tag key is longer than %d characters", maxTagKeyLength)
	case strings.HasPrefix(strings.ToLower(key), "aws:"):
		return invalid(param, "tag key %q: keys starting with aws: are reserved by AWS", key)
	}
	return nil
}

// checkTagValue enforces EC2's rules for a tag value.
func checkTagValue(param, value string) error {
	switch {
	case !utf8.ValidString(value):
		return invalid(param, "the tag value is not valid UTF-8")
	case utf8.RuneCountInString(value) > maxTagValueLength:
		return invalid(param, "the tag value is longer than %d characters", maxTagValueLength)
	}
	return nil
}

// checkUserTagKey refuses keys the driver or Kubernetes own: a user who set
// CSIVolumeName, a cluster tag or a created-for tag could make the driver
// adopt or lose track of a volume.
func (p *Parser) checkUserTagKey(param, key string) error {
	if err := checkTagKeySyntax(param, key); err != nil {
		return err
	}
	lower := strings.ToLower(key)
	switch {
	case key == cloud.TagVolumeName, key == cloud.TagSnapshotName:
		return invalid(param, "tag key %q is reserved for the driver", key)
	case strings.HasPrefix(lower, reservedTagPrefix):
		return invalid(param, "tag key %q is reserved: keys starting with %s belong to Kubernetes", key, reservedTagPrefix)
	case strings.HasPrefix(lower, strings.ToLower(p.driverName)+"/"):
		return invalid(param, "tag key %q is reserved: keys starting with %s/ belong to the driver", key, p.driverName)
	}
	return nil
}

// tagSpecification evaluates one tagSpecification_<N> parameter: the value
// is "key=template", and the template is rendered over data.
func (p *Parser) tagSpecification(param, spec string, data any) (string, string, error) {
	key, tmpl, ok := strings.Cut(spec, "=")
	if !ok {
		return "", "", invalid(param, "want key=value, got %q", spec)
	}
	if err := p.checkUserTagKey(param, key); err != nil {
		return "", "", err
	}
	value, err := evaluateTemplate(param, tmpl, data)
	if err != nil {
		return "", "", err
	}
	if err := checkTagValue(param, value); err != nil {
		return "", "", err
	}
	return key, value, nil
}

// tagSet collects tags from several parameters and refuses the same tag key
// from two of them, which would otherwise be resolved by map order.
type tagSet struct {
	tags   map[string]string
	source map[string]string
}

func newTagSet() *tagSet {
	return &tagSet{tags: map[string]string{}, source: map[string]string{}}
}

func (s *tagSet) add(param, key, value string) error {
	if prev, dup := s.source[key]; dup {
		return invalid(param, "tag %q is also set by parameter %q", key, prev)
	}
	s.tags[key] = value
	s.source[key] = param
	return nil
}

// sortedKeys returns a map's keys in order, so parameters are checked (and
// errors reported) the same way on every attempt.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// mergeTags copies layers into one map; later layers win.
func mergeTags(layers ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, l := range layers {
		for k, v := range l {
			out[k] = v
		}
	}
	return out
}
