package poll

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// PodReady reports whether a pod's Ready condition is true.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodEnded returns an error when the pod has finished (Succeeded or
// Failed): a pod waited for to become Ready never will, so the wait should
// end at once instead of at its timeout.
func PodEnded(p *corev1.Pod) error {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return fmt.Errorf("pod %s ended: %s %s", p.Name, p.Status.Phase, p.Status.Message)
	}
	return nil
}
