// Package health is the vocabulary in which Diskplane reports what is wrong
// with a volume: the controller from the cloud's volume status, the node
// from the kernel's view of the device and the filesystem on it. A volume's
// health is a list of findings; a volume with none is healthy. The driver
// layer turns findings into the CSI answers (a volume condition, a
// VolumeHealth), so the checks themselves know nothing of CSI.
package health

import "strings"

// Kind is how badly a finding affects the volume. The kinds are CSI's
// volume health error types, so that a CO can act on them (a degraded
// volume still serves, an inaccessible one does not, a lost one needs a
// restore).
type Kind int

// The kinds of finding.
const (
	// Degraded: the volume serves, but not as it should (slow, errors seen,
	// a check that needs a person).
	Degraded Kind = iota + 1
	// Inaccessible: the volume cannot serve reads or writes here (device
	// gone, I/O disabled, filesystem read-only or shut down).
	Inaccessible
	// DataLoss: data is known or strongly suspected to be lost or corrupted.
	DataLoss
)

// String names the kind as CSI's VolumeHealthErrorType does.
func (k Kind) String() string {
	switch k {
	case Degraded:
		return "DEGRADED"
	case Inaccessible:
		return "INACCESSIBLE"
	case DataLoss:
		return "DATA_LOSS"
	}
	return "UNKNOWN"
}

// Finding is one thing wrong with a volume.
type Finding struct {
	Kind Kind
	// Reason is a short CamelCase name of the condition, for machines and
	// narrow columns (e.g. DeviceGone); one volume has each Reason once.
	Reason string
	// Message says, in a sentence, what is wrong and what a person can do
	// about it.
	Message string
}

// Report is what a check found about one volume. An empty report means
// healthy; Notes then say what was looked at, or why the health is not
// fully known (checks still running, a status that could not be read).
type Report struct {
	Findings []Finding
	// Notes are facts worth showing that are not problems: a volume still
	// initializing from its snapshot, a status EC2 has not settled yet.
	Notes []string
}

// Abnormal reports whether anything is wrong.
func (r Report) Abnormal() bool { return len(r.Findings) > 0 }

// Add records a finding, keeping one per reason (the first one wins: checks
// run from the most to the least specific).
func (r *Report) Add(kind Kind, reason, message string) {
	for _, f := range r.Findings {
		if f.Reason == reason {
			return
		}
	}
	r.Findings = append(r.Findings, Finding{Kind: kind, Reason: reason, Message: message})
}

// Note records a fact that is not a problem.
func (r *Report) Note(note string) { r.Notes = append(r.Notes, note) }

// Merge adds the findings and notes of another report.
func (r *Report) Merge(o Report) {
	for _, f := range o.Findings {
		r.Add(f.Kind, f.Reason, f.Message)
	}
	r.Notes = append(r.Notes, o.Notes...)
}

// Message is the report in one line, for a volume condition: every
// finding's message, then the notes; "healthy" leads when nothing is wrong.
func (r Report) Message() string {
	parts := make([]string, 0, len(r.Findings)+len(r.Notes)+1)
	if !r.Abnormal() {
		parts = append(parts, "healthy")
	}
	for _, f := range r.Findings {
		parts = append(parts, f.Message)
	}
	parts = append(parts, r.Notes...)
	return strings.Join(parts, "; ")
}
