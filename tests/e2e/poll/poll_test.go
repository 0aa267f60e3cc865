package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestUntil(t *testing.T) {
	errBroken := errors.New("broken")
	tests := []struct {
		name    string
		check   func(calls int) (bool, string, error)
		timeout time.Duration
		wantErr string // "" for success
		wantIs  error
	}{
		{
			name:    "done at once",
			check:   func(int) (bool, string, error) { return true, "", nil },
			timeout: time.Minute,
		},
		{
			name:    "done on the second look",
			check:   func(calls int) (bool, string, error) { return calls == 2, "first look", nil },
			timeout: time.Minute,
		},
		{
			name:    "an error ends the wait",
			check:   func(int) (bool, string, error) { return false, "", errBroken },
			timeout: time.Minute,
			wantIs:  errBroken,
		},
		{
			name:    "timeout quotes the last state",
			check:   func(int) (bool, string, error) { return false, "pod Pending", nil },
			timeout: 10 * time.Millisecond,
			wantErr: "last: pod Pending",
		},
		{
			name:    "timeout without a state says so",
			check:   func(int) (bool, string, error) { return false, "", nil },
			timeout: 10 * time.Millisecond,
			wantErr: "no state reported",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := Until(t.Context(), tc.timeout, func(context.Context) (bool, string, error) {
				calls++
				return tc.check(calls)
			})
			switch {
			case tc.wantIs != nil:
				if !errors.Is(err, tc.wantIs) {
					t.Fatalf("Until = %v, want %v", err, tc.wantIs)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Until = %v, want an error containing %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("Until = %v, want success", err)
			}
		})
	}
}

func TestPodReadyAndEnded(t *testing.T) {
	cond := func(s corev1.ConditionStatus) []corev1.PodCondition {
		return []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: s}}
	}
	tests := []struct {
		name      string
		status    corev1.PodStatus
		wantReady bool
		wantEnded bool
	}{
		{name: "pending, no conditions", status: corev1.PodStatus{Phase: corev1.PodPending}},
		{name: "running, not ready", status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: cond(corev1.ConditionFalse)}},
		{name: "running and ready", status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: cond(corev1.ConditionTrue)}, wantReady: true},
		{name: "failed", status: corev1.PodStatus{Phase: corev1.PodFailed, Message: "OOMKilled"}, wantEnded: true},
		{name: "succeeded", status: corev1.PodStatus{Phase: corev1.PodSucceeded}, wantEnded: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app"}, Status: tc.status}
			if got := PodReady(p); got != tc.wantReady {
				t.Errorf("PodReady = %v, want %v", got, tc.wantReady)
			}
			if err := PodEnded(p); (err != nil) != tc.wantEnded {
				t.Errorf("PodEnded = %v, want an error: %v", err, tc.wantEnded)
			}
		})
	}
}
