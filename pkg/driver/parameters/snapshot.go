package parameters

import "strings"

// Snapshot is what a CreateSnapshot request's VolumeSnapshotClass parameters ask for.
type Snapshot struct {
	// Metadata is the VolumeSnapshot the snapshotter created the snapshot for.
	Metadata SnapshotTemplateData
	// Tags are every tag to set on the new snapshot: --extra-tags, the
	// class's tagSpecification_<N> and the cluster tags. The cloud adds
	// CSIVolumeSnapshotName.
	Tags map[string]string
}

// Snapshot parses a CreateSnapshot request's parameters.
func (p *Parser) Snapshot(parameters map[string]string) (*Snapshot, error) {
	s := &Snapshot{}
	specs := map[string]string{}
	err := newParams().each(parameters, func(key, lower, value string) error {
		switch lower {
		case strings.ToLower(KeyVolumeSnapshotName):
			s.Metadata.VolumeSnapshotName = value
		case strings.ToLower(KeyVolumeSnapshotNamespace):
			s.Metadata.VolumeSnapshotNamespace = value
		case strings.ToLower(KeyVolumeSnapshotContentName):
			s.Metadata.VolumeSnapshotContentName = value
		default:
			if hasPrefixFold(key, KeyTagSpecificationPrefix) {
				specs[key] = value
				return nil
			}
			return invalid(key, "is not a VolumeSnapshotClass parameter Diskplane knows (only tagSpecification_<N> is)")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	classTags, err := p.evaluateSpecs(specs, s.Metadata)
	if err != nil {
		return nil, err
	}
	s.Tags = mergeTags(p.extraTags, classTags, p.ownerTags)
	return s, nil
}
