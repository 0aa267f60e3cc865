package controller

import (
	"cmp"
	"hash/fnv"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// Topology keys. Nodes report the zone; a StorageClass's allowedTopologies
// may name zone IDs instead (the same zone name maps to different zones in
// different AWS accounts, a zone ID does not).
const (
	// TopologyZoneKey carries an availability zone name, e.g. us-east-1a.
	TopologyZoneKey = "topology.kubernetes.io/zone"
	// TopologyZoneIDKey carries an availability zone ID, e.g. use1-az1; it is
	// only read from requests, never reported.
	TopologyZoneIDKey = "topology.k8s.aws/zone-id"
)

// placement is where a request allows a new volume to be.
type placement struct {
	// zone or zoneID is where to create the volume (at most one is set);
	// both empty lets the cloud pick.
	zone, zoneID string
	// allowedZones and allowedZoneIDs are every zone the request accepts;
	// both empty means any zone.
	allowedZones, allowedZoneIDs []string
}

// place reads a request's accessibility requirements. The first preferred
// segment that names a zone wins (with WaitForFirstConsumer the
// provisioner puts the chosen node's zone first); otherwise one of the
// requisite zones is picked from a hash of the volume name, which spreads
// volumes across zones yet gives a retried request the same zone, so its
// EC2 ClientToken matches the first attempt's.
func place(name string, req *csi.TopologyRequirement) placement {
	var p placement
	add := func(seg *csi.Topology) (zone, zoneID string) {
		zone, zoneID = seg.GetSegments()[TopologyZoneKey], seg.GetSegments()[TopologyZoneIDKey]
		if zone != "" && !slices.Contains(p.allowedZones, zone) {
			p.allowedZones = append(p.allowedZones, zone)
		}
		if zoneID != "" && !slices.Contains(p.allowedZoneIDs, zoneID) {
			p.allowedZoneIDs = append(p.allowedZoneIDs, zoneID)
		}
		return zone, zoneID
	}
	type choice struct{ zone, zoneID string }
	var preferred, requisite []choice
	for _, seg := range req.GetPreferred() {
		if z, id := add(seg); z != "" || id != "" {
			preferred = append(preferred, choice{z, id})
		}
	}
	for _, seg := range req.GetRequisite() {
		if z, id := add(seg); z != "" || id != "" {
			requisite = append(requisite, choice{z, id})
		}
	}
	var pick choice
	switch {
	case len(preferred) > 0:
		pick = preferred[0]
	case len(requisite) > 0:
		slices.SortFunc(requisite, func(a, b choice) int {
			return cmp.Or(cmp.Compare(a.zone, b.zone), cmp.Compare(a.zoneID, b.zoneID))
		})
		h := fnv.New32a()
		_, _ = h.Write([]byte(name))
		pick = requisite[h.Sum32()%uint32(len(requisite))]
	}
	// A segment naming both keys is honoured by its zone name; the cloud takes one or the other.
	if pick.zone != "" {
		p.zone = pick.zone
	} else {
		p.zoneID = pick.zoneID
	}
	return p
}

// allows reports whether a volume in zone (with ID zoneID) meets the placement.
func (p placement) allows(zone, zoneID string) bool {
	if len(p.allowedZones) == 0 && len(p.allowedZoneIDs) == 0 {
		return true
	}
	return slices.Contains(p.allowedZones, zone) || slices.Contains(p.allowedZoneIDs, zoneID)
}

// volumeTopology is where a volume can be used: its zone, which nodes
// report under the same key.
func volumeTopology(v *cloud.Volume) []*csi.Topology {
	if v.Zone == "" {
		return nil
	}
	return []*csi.Topology{{Segments: map[string]string{TopologyZoneKey: v.Zone}}}
}
