package parameters

import "fmt"

// Error reports a StorageClass, VolumeSnapshotClass or VolumeAttributesClass
// parameter the driver cannot accept. It names the parameter as the user
// wrote it, so the event on the PVC points at the line to fix; the controller
// answers it with InvalidArgument.
type Error struct {
	// Key is the parameter key as given (or the flag name for --extra-tags);
	// empty when Reason names the keys itself (a combination of format options).
	Key string
	// Reason says what is wrong with it, in the user's terms.
	Reason string
}

// Error renders the problem as `parameter "iops": must be a whole number above zero, not "fast"`.
func (e *Error) Error() string {
	if e.Key == "" {
		return e.Reason
	}
	return fmt.Sprintf("parameter %q: %s", e.Key, e.Reason)
}

func invalid(key, format string, args ...any) *Error {
	return &Error{Key: key, Reason: fmt.Sprintf(format, args...)}
}
