package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"k8s.io/klog/v2"
)

// EC2's default account quotas per region (Service Quotas, Amazon Elastic
// Block Store): storage per volume type in TiB and the number of snapshots.
const (
	// DefaultStorageQuotaTiB is the storage quota of every volume type but
	// io2.
	DefaultStorageQuotaTiB = 50
	// DefaultIo2StorageQuotaTiB is io2's storage quota.
	DefaultIo2StorageQuotaTiB = 20
	// DefaultSnapshotQuota is the number of snapshots a region may hold.
	DefaultSnapshotQuota = 100000
)

// Quotas are the account's limits in the emulated region, so a client's
// handling of VolumeLimitExceeded and SnapshotLimitExceeded can be
// exercised. Storage counts every volume that is not gone yet (creating,
// available, in use and deleting, as on EC2) at its size, or at its target
// size and type while a modification is still modifying; snapshots count
// every snapshot that exists, pending or completed.
type Quotas struct {
	// StorageTiB is the storage quota per volume type in TiB. In a Config or
	// a SetQuotas call a type left out keeps EC2's default; a negative value
	// means no limit and 0 allows no storage of the type.
	StorageTiB map[string]int64 `json:"storageTiB,omitempty"`
	// Snapshots is the snapshot count quota. In a Config or a SetQuotas call
	// 0 means EC2's default and a negative value means no limit.
	Snapshots int64 `json:"snapshots,omitempty"`
}

// DefaultQuotas are EC2's default quotas: 50 TiB per volume type (20 TiB
// for io2) and 100,000 snapshots.
func DefaultQuotas() Quotas {
	q := Quotas{StorageTiB: map[string]int64{}, Snapshots: DefaultSnapshotQuota}
	for t := range volumeRules {
		q.StorageTiB[t] = DefaultStorageQuotaTiB
	}
	q.StorageTiB["io2"] = DefaultIo2StorageQuotaTiB
	return q
}

// withDefaults validates q and fills in EC2's default for every quota it
// leaves out.
func (q Quotas) withDefaults() (Quotas, error) {
	out := DefaultQuotas()
	for t, tib := range q.StorageTiB {
		if _, ok := volumeRules[t]; !ok {
			return out, fmt.Errorf("storage quota of unknown volume type %q (known: %v)", t, VolumeTypes())
		}
		out.StorageTiB[t] = tib
	}
	if q.Snapshots != 0 {
		out.Snapshots = q.Snapshots
	}
	return out, nil
}

// VolumeTypes lists the volume types EC2 offers, sorted.
func VolumeTypes() []string {
	return slices.Sorted(maps.Keys(volumeRules))
}

// Quotas is the quota setting in force, every type and the snapshot count
// spelled out.
func (c *Cloud) Quotas() Quotas {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Quotas{StorageTiB: maps.Clone(c.quotas.StorageTiB), Snapshots: c.quotas.Snapshots}
}

// SetQuotas replaces the quota setting; what q leaves out gets EC2's
// default. It applies from the next request on; volumes and snapshots
// already over a lowered quota stay.
func (c *Cloud) SetQuotas(q Quotas) error {
	q, err := q.withDefaults()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.quotas = q
	c.mu.Unlock()
	klog.V(2).InfoS("Quota setting changed", "storageTiB", q.StorageTiB, "snapshots", q.Snapshots)
	return nil
}

// PatchQuotas applies a JSON document onto the current setting: the volume
// types and fields it names change, the rest stay.
func (c *Cloud) PatchQuotas(doc []byte) error {
	q := c.Quotas()
	if err := json.Unmarshal(doc, &q); err != nil {
		return fmt.Errorf("quota setting: %w", err)
	}
	return c.SetQuotas(q)
}

// storageUsedGiB is how much storage of volumeType the region's volumes
// hold, leaving out the volume named except (if any).
func (c *Cloud) storageUsedGiB(volumeType, except string) int64 {
	var used int64
	for _, v := range c.st.Volumes {
		if v.ID == except {
			continue
		}
		size, typ := v.Size, v.Type
		if m := c.st.Modifications[v.ID]; m != nil && m.State == ModificationModifying {
			size, typ = m.Target.Size, m.Target.Type
		}
		if typ == volumeType {
			used += int64(size)
		}
	}
	return used
}

// checkStorageQuota refuses a volume of size GiB and volumeType that would
// take the region over its storage quota. except names a volume whose
// present storage the new size replaces (a modification), or is empty.
func (c *Cloud) checkStorageQuota(volumeType string, size int32, except string) *Error {
	limit, ok := c.quotas.StorageTiB[volumeType]
	if !ok || limit < 0 {
		return nil
	}
	if c.storageUsedGiB(volumeType, except)+int64(size) <= limit*1024 {
		return nil
	}
	return Errorf(CodeVolumeLimitExceeded, "You have exceeded your maximum %s storage limit of %d TiB in this region. Please contact AWS Support to request an Elastic Block Store service limit increase.", volumeType, limit)
}

// checkSnapshotQuota refuses a snapshot that would take the region over its
// snapshot count quota.
func (c *Cloud) checkSnapshotQuota() *Error {
	limit := c.quotas.Snapshots
	if limit < 0 || int64(len(c.st.Snapshots)) < limit {
		return nil
	}
	return Errorf(CodeSnapshotLimitExceeded, "You have reached the maximum number of snapshots allowed in this region (%d). Please contact AWS Support to request an Elastic Block Store service limit increase.", limit)
}
