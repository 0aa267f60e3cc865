package node

import (
	"crypto/sha256"
	"sync"
	"time"
)

// unlocks is what the node remembers, in memory only, about the volumes
// whose key KMS wraps (nodeEncryptionKeySource: kms): for each publication,
// the token that authorised it, so that a republish with the same token is
// answered without asking STS and KMS again or touching a mount; the
// refusals of recent tokens, so that a revoked pod's republishes do not ask
// again every time; and where each volume is staged, so that the last
// unpublish can close it. A restarted plugin knows nothing: each
// publication is authorised anew at its next (re)publish, and a volume no
// (re)publish reached since is closed by NodeUnstageVolume. Tokens
// themselves are never kept, only their SHA-256 digests.
type unlocks struct {
	mu       sync.Mutex
	volumes  map[string]*unlockedVolume // by volume ID
	refusals map[publication]refusal
}

// publication is one volume published at one target path.
type publication struct {
	volumeID, target string
}

// unlockedVolume is a volume this node opened with a key KMS unwrapped.
type unlockedVolume struct {
	// staging is where its mapping is mounted.
	staging string
	// authorized are its publications and what authorised each.
	authorized map[string]authorization
	// growPending: NodeExpandVolume found its mapping must grow, which
	// needs the key, so the next publish unwraps it even for a token
	// authorised already.
	growPending bool
	// fenced: a revocation remounted its filesystem read-only.
	fenced bool
}

// authorization is a token that authorised a publication.
type authorization struct {
	digest   [sha256.Size]byte
	expires  time.Time // authorisedUntil; zero: not reused at all
	readOnly bool
}

// refusal is the answer STS or KMS gave a token, kept until recheck; a
// revocation's is kept, as what the volume's condition reports, until a
// later token is authorised or the publication goes.
type refusal struct {
	digest  [sha256.Size]byte
	err     error
	recheck time.Time
	// revoked: the publication was mounted, so its pod kept its mount
	// after losing access.
	revoked bool
}

// refusalRecheck is how long a refused token's answer is repeated without
// asking STS and KMS again: the kubelet republishes far more often, and an
// operator who restores the role's access sees it take effect within it.
const refusalRecheck = time.Minute

func newUnlocks() *unlocks {
	return &unlocks{volumes: map[string]*unlockedVolume{}, refusals: map[publication]refusal{}}
}

func tokenDigest(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// answer returns the answer already known for a publication with this
// token: nil for one it authorised (until the token expires, by its own exp
// claim or the kubelet's word when sooner, with the same
// read-only state and no growth pending), the refusal for one refused in
// the last refusalRecheck. known is false when STS and KMS must be asked.
func (u *unlocks) answer(p publication, digest [sha256.Size]byte, readOnly bool, now time.Time) (known bool, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if r, ok := u.refusals[p]; ok && r.digest == digest && now.Before(r.recheck) {
		return true, r.err
	}
	v, ok := u.volumes[p.volumeID]
	if !ok || v.growPending {
		return false, nil
	}
	a, ok := v.authorized[p.target]
	return ok && a.digest == digest && a.readOnly == readOnly && now.Before(a.expires), nil
}

// authorize records a publication a token authorised.
func (u *unlocks) authorize(p publication, staging string, a authorization) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.refusals, p)
	v, ok := u.volumes[p.volumeID]
	if !ok {
		v = &unlockedVolume{authorized: map[string]authorization{}}
		u.volumes[p.volumeID] = v
	}
	v.staging = staging
	v.authorized[p.target] = a
}

// refuse records a token's refusal; a publication it authorised before
// stays (the kubelet keeps the pod's mount, and so does the node).
func (u *unlocks) refuse(p publication, digest [sha256.Size]byte, err error, now time.Time, revoked bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.refusals[p] = refusal{digest: digest, err: err, recheck: now.Add(refusalRecheck), revoked: revoked}
	if v, ok := u.volumes[p.volumeID]; ok {
		delete(v.authorized, p.target)
	}
}

// revocation is the refusal that revoked a mounted publication's access,
// while no later token has been authorised for it.
func (u *unlocks) revocation(p publication) (refusal, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	r, ok := u.refusals[p]
	return r, ok && r.revoked
}

// release forgets a publication and reports the volume's staging path when
// no publication of it is left that this node knows of. The volume stays
// known until forget, so a close that failed is retried by the kubelet's
// next unpublish.
func (u *unlocks) release(p publication) (staging string, last bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.refusals, p)
	v, ok := u.volumes[p.volumeID]
	if !ok {
		return "", false
	}
	delete(v.authorized, p.target)
	return v.staging, len(v.authorized) == 0
}

// forget drops a closed volume.
func (u *unlocks) forget(volumeID string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.volumes, volumeID)
	for p := range u.refusals {
		if p.volumeID == volumeID {
			delete(u.refusals, p)
		}
	}
}

// setGrowPending marks or clears a volume's pending growth; it reports
// whether the volume is known.
func (u *unlocks) setGrowPending(volumeID string, pending bool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	v, ok := u.volumes[volumeID]
	if ok {
		v.growPending = pending
	}
	return ok
}

// setFenced records that a volume's filesystem was made read-only after a
// revocation (or writable again), keeping its staging path.
func (u *unlocks) setFenced(volumeID, staging string, fenced bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	v, ok := u.volumes[volumeID]
	if !ok {
		v = &unlockedVolume{authorized: map[string]authorization{}}
		u.volumes[volumeID] = v
	}
	v.staging, v.fenced = staging, fenced
}

// isFenced reports whether this plugin made a volume read-only.
func (u *unlocks) isFenced(volumeID string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	v, ok := u.volumes[volumeID]
	return ok && v.fenced
}

// clearedFence returns the staging path of a fenced volume none of whose
// publications but except is revoked any more.
func (u *unlocks) clearedFence(except publication) (staging string, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	v, known := u.volumes[except.volumeID]
	if !known || !v.fenced {
		return "", false
	}
	for p, r := range u.refusals {
		if p.volumeID == except.volumeID && p != except && r.revoked {
			return "", false
		}
	}
	return v.staging, true
}
