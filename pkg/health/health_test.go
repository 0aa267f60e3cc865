package health

import "testing"

func TestReport(t *testing.T) {
	tests := []struct {
		name         string
		build        func(r *Report)
		wantAbnormal bool
		wantMessage  string
		wantFindings int
	}{
		{name: "empty is healthy", build: func(*Report) {}, wantMessage: "healthy"},
		{name: "notes keep it healthy", build: func(r *Report) { r.Note("initializing: 40%") }, wantMessage: "healthy; initializing: 40%"},
		{
			name: "findings then notes",
			build: func(r *Report) {
				r.Add(Inaccessible, "DeviceGone", "the device is gone")
				r.Note("checked 1 mount")
			},
			wantAbnormal: true, wantMessage: "the device is gone; checked 1 mount", wantFindings: 1,
		},
		{
			name: "one finding per reason, the first wins",
			build: func(r *Report) {
				r.Add(Degraded, "FilesystemErrors", "first")
				r.Add(DataLoss, "FilesystemErrors", "second")
				r.Add(Degraded, "DeviceIOErrors", "third")
			},
			wantAbnormal: true, wantMessage: "first; third", wantFindings: 2,
		},
		{
			name: "merge keeps reasons unique",
			build: func(r *Report) {
				r.Add(Degraded, "A", "a")
				var o Report
				o.Add(Inaccessible, "A", "a again")
				o.Add(Inaccessible, "B", "b")
				o.Note("n")
				r.Merge(o)
			},
			wantAbnormal: true, wantMessage: "a; b; n", wantFindings: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Report
			tc.build(&r)
			if got := r.Abnormal(); got != tc.wantAbnormal {
				t.Errorf("Abnormal = %v, want %v", got, tc.wantAbnormal)
			}
			if got := r.Message(); got != tc.wantMessage {
				t.Errorf("Message = %q, want %q", got, tc.wantMessage)
			}
			if len(r.Findings) != tc.wantFindings {
				t.Errorf("%d findings, want %d: %+v", len(r.Findings), tc.wantFindings, r.Findings)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Degraded: "DEGRADED", Inaccessible: "INACCESSIBLE", DataLoss: "DATA_LOSS", 0: "UNKNOWN"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}
