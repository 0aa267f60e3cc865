package parameters

import (
	"sort"
	"strings"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// Modification is what a VolumeAttributesClass asks to change on an existing
// volume (ControllerModifyVolume). Only the keys given change anything; a
// key the class leaves out keeps its current value.
type Modification struct {
	// Volume is the change to the volume itself; zero fields stay as they are.
	Volume cloud.VolumeModification
	// SetTags are tags to add or overwrite (tagSpecification_<N>).
	SetTags map[string]string
	// DeleteTags are tag keys to remove (tagDeletion_<N>), sorted.
	DeleteTags []string

	// iopsKey and throughputKey are the keys as the class spelled them, for messages.
	iopsKey, throughputKey string
}

// CheckVolumeType refuses IOPS or throughput that the volume's type does
// not have: the type the modification sets, else the volume's current type.
// The controller calls it before changing anything, so a class that cannot
// apply to this volume fails without a partial change.
func (m *Modification) CheckVolumeType(current cloud.VolumeType) error {
	t := m.Volume.Type
	if t == "" {
		t = current
	}
	return checkPerformance(t, m.iopsKey, m.Volume.IOPS, "", 0, m.throughputKey, m.Volume.Throughput)
}

// ChangesTags reports whether the modification touches tags.
func (m *Modification) ChangesTags() bool { return len(m.SetTags) > 0 || len(m.DeleteTags) > 0 }

// mutableKeys lists, for messages, what a VolumeAttributesClass may set.
const mutableKeys = "type, iops, throughput, tagSpecification_<N> and tagDeletion_<N>"

// Modification parses ControllerModifyVolume's mutable parameters. The
// resizer's --extra-modify-metadata keys (PVC and PV names) are accepted for
// use in tag templates.
func (p *Parser) Modification(mutable map[string]string) (*Modification, error) {
	m := &Modification{SetTags: map[string]string{}}
	var data VolumeTemplateData
	specs := map[string]string{}
	deletions := map[string]string{}
	err := newParams().each(mutable, func(key, lower, value string) error {
		var err error
		switch lower {
		case strings.ToLower(KeyType):
			m.Volume.Type, err = parseVolumeType(key, value)
		case strings.ToLower(KeyIOPS):
			m.iopsKey = key
			m.Volume.IOPS, err = parsePositive(key, value)
		case strings.ToLower(KeyThroughput):
			m.throughputKey = key
			m.Volume.Throughput, err = parsePositive(key, value)
		case strings.ToLower(KeyPVCName):
			data.PVCName = value
		case strings.ToLower(KeyPVCNamespace):
			data.PVCNamespace = value
		case strings.ToLower(KeyPVName):
			data.PVName = value
		default:
			switch {
			case hasPrefixFold(key, KeyTagSpecificationPrefix):
				specs[key] = value
			case hasPrefixFold(key, KeyTagDeletionPrefix):
				deletions[key] = value
			default:
				return invalid(key, "is not a VolumeAttributesClass parameter Diskplane knows (only %s are)", mutableKeys)
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if m.Volume.Type != "" {
		if err := m.CheckVolumeType(""); err != nil {
			return nil, err
		}
	}
	if m.SetTags, err = p.evaluateSpecs(specs, data); err != nil {
		return nil, err
	}
	if m.DeleteTags, err = p.tagDeletions(deletions, m.SetTags); err != nil {
		return nil, err
	}
	return m, nil
}

// tagDeletions checks the tagDeletion_<N> parameters of a
// VolumeAttributesClass and returns the tag keys they remove, sorted and
// each once. A reserved key, or one the class's own tagSpecification_<N>
// sets (set), is refused.
func (p *Parser) tagDeletions(deletions, set map[string]string) ([]string, error) {
	var keys []string
	deleted := map[string]bool{}
	for _, param := range sortedKeys(deletions) {
		key := deletions[param]
		if err := p.checkUserTagKey(param, key); err != nil {
			return nil, err
		}
		if _, ok := set[key]; ok {
			return nil, invalid(param, "removes tag %q that a tagSpecification of the same class sets", key)
		}
		if !deleted[key] {
			deleted[key] = true
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys, nil
}
