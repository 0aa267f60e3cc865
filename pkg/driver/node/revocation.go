package node

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/health"
	"github.com/diskplane/diskplane/pkg/podevents"
)

// ReasonKeyAccessRevoked is the reason of the event on a pod whose access
// to its mounted volume's key was revoked, and of the volume condition at
// its target.
const ReasonKeyAccessRevoked = "KeyAccessRevoked"

// revoked acts on a refused republish of a mounted publication (the pod's
// access to the volume's key was revoked while it runs): with
// nodeEncryptionOnRevocation: read-only it fences the volume on this node,
// and it records a warning on the pod. It returns the refusal as the pod
// sees it, saying what was done.
func (s *Service) revoked(pub publication, staging string, key volumecontext.KMSKey, who tokenIdentity, refused error) error {
	st := status.Convert(refused)
	msg := st.Message()
	if key.FenceOnRevocation {
		if err := s.fence(pub.volumeID, staging); err != nil {
			klog.ErrorS(err, "Could not fence a volume whose pod's access was revoked", "volumeID", pub.volumeID, "stagingTargetPath", staging)
			msg += fmt.Sprintf("; fencing the volume read-only failed (%v): it is still writable", err)
		} else {
			msg += fmt.Sprintf("; the volume's filesystem on this node is read-only (%s: %s) until a token of its pods is authorised again",
				volumecontext.NodeEncryptionOnRevocationKey, volumecontext.RevocationReadOnly)
		}
	} else {
		msg += "; the pod keeps its mount until it stops"
	}
	if s.events != nil && who.pod != "" {
		s.events.Warn(podevents.Pod{Namespace: who.namespace, Name: who.pod, UID: who.podUID}, ReasonKeyAccessRevoked,
			fmt.Sprintf("Diskplane: access to the key of volume %s was revoked: %s", pub.volumeID, msg))
	}
	return status.Error(st.Code(), msg)
}

// fence remounts the volume's filesystem read-only on this node, for every
// pod that has it mounted here: a remount of the pod's own bind mount would
// not reach the container's copy of it. A filesystem staged read-only is
// left as it is (and never made writable by unfence).
func (s *Service) fence(volumeID, staging string) error {
	if staging == "" {
		return fmt.Errorf("volume %s's staging path is not known", volumeID)
	}
	if s.unlocks.isFenced(volumeID) {
		return nil
	}
	readOnly, err := s.os.MountedReadOnly(staging)
	if err != nil {
		return err
	}
	if readOnly {
		return nil
	}
	if err := s.os.RemountFilesystem(staging, true); err != nil {
		return err
	}
	s.unlocks.setFenced(volumeID, staging, true)
	klog.V(2).InfoS("Volume fenced read-only after a pod's access to its key was revoked", "volumeID", volumeID, "stagingTargetPath", staging)
	return nil
}

// unfence makes a fenced volume writable again once no publication of it
// but pub (whose token was just authorised, or which is gone) stays
// revoked. A plugin restarted since it fenced a volume does not know it did,
// and leaves it read-only until it is unstaged.
func (s *Service) unfence(pub publication) error {
	staging, ok := s.unlocks.clearedFence(pub)
	if !ok {
		return nil
	}
	if err := s.os.RemountFilesystem(staging, false); err != nil {
		return status.Errorf(codes.Internal, "make volume %s writable again after its pods' access came back: %v", pub.volumeID, err)
	}
	s.unlocks.setFenced(pub.volumeID, staging, false)
	klog.V(2).InfoS("Volume writable again: no publication of it is revoked", "volumeID", pub.volumeID, "stagingTargetPath", staging)
	return nil
}

// reportRevocation adds to a volume's health that the pod published at
// target lost access to the volume's key while mounted: the kubelet shows
// the volume condition on the pod, where a refused republish's error alone
// is easily missed, since the pod keeps running with its mount.
func (s *Service) reportRevocation(volumeID, target string, r *health.Report) {
	if target == "" {
		return
	}
	if refused, ok := s.unlocks.revocation(publication{volumeID: volumeID, target: target}); ok {
		r.Add(health.Degraded, ReasonKeyAccessRevoked, "the pod's access to the volume's key was revoked ("+status.Convert(refused.err).Message()+
			"): delete the pod to cut it off")
	}
}
