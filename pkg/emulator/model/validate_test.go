package model

import "testing"

func TestCreateSettings(t *testing.T) {
	tests := []struct {
		name     string
		req      requestedSettings
		want     VolumeSettings
		wantCode string
	}{
		{name: "gp2 takes size only", req: requestedSettings{Type: "gp2", Size: 10}, want: VolumeSettings{Type: "gp2", Size: 10}},
		{name: "gp3 defaults", req: requestedSettings{Type: "gp3", Size: 1}, want: VolumeSettings{Type: "gp3", Size: 1, Iops: 3000, Throughput: 125}},
		{name: "gp3 at the new maximum size", req: requestedSettings{Type: "gp3", Size: 65536}, want: VolumeSettings{Type: "gp3", Size: 65536, Iops: 3000, Throughput: 125}},
		{name: "gp3 too large", req: requestedSettings{Type: "gp3", Size: 65537}, wantCode: CodeInvalidParameterValue},
		{name: "gp3 zero size", req: requestedSettings{Type: "gp3", Size: 0}, wantCode: CodeInvalidParameterValue},
		{name: "gp3 max iops", req: requestedSettings{Type: "gp3", Size: 160, Iops: i32(80000)}, want: VolumeSettings{Type: "gp3", Size: 160, Iops: 80000, Throughput: 125}},
		{name: "gp3 iops above max", req: requestedSettings{Type: "gp3", Size: 1000, Iops: i32(80001)}, wantCode: CodeInvalidParameterValue},
		{name: "gp3 iops below min", req: requestedSettings{Type: "gp3", Size: 100, Iops: i32(2999)}, wantCode: CodeInvalidParameterValue},
		{name: "gp3 iops per GiB ratio", req: requestedSettings{Type: "gp3", Size: 10, Iops: i32(5001)}, wantCode: CodeInvalidParameterValue},
		{name: "gp3 ratio at the limit", req: requestedSettings{Type: "gp3", Size: 10, Iops: i32(5000)}, want: VolumeSettings{Type: "gp3", Size: 10, Iops: 5000, Throughput: 125}},
		{name: "gp3 baseline iops on a tiny volume", req: requestedSettings{Type: "gp3", Size: 1, Iops: i32(3000)}, want: VolumeSettings{Type: "gp3", Size: 1, Iops: 3000, Throughput: 125}},
		{name: "gp3 max throughput", req: requestedSettings{Type: "gp3", Size: 100, Iops: i32(8000), Throughput: i32(2000)}, want: VolumeSettings{Type: "gp3", Size: 100, Iops: 8000, Throughput: 2000}},
		{name: "gp3 throughput above max", req: requestedSettings{Type: "gp3", Size: 100, Iops: i32(16000), Throughput: i32(2001)}, wantCode: CodeInvalidParameterValue},
		{name: "gp3 throughput below min", req: requestedSettings{Type: "gp3", Size: 100, Throughput: i32(124)}, wantCode: CodeInvalidParameterValue},
		{name: "gp3 throughput per iops", req: requestedSettings{Type: "gp3", Size: 100, Iops: i32(3000), Throughput: i32(751)}, wantCode: CodeInvalidParameterValue},
		{name: "gp3 throughput at quarter per iops", req: requestedSettings{Type: "gp3", Size: 100, Iops: i32(3000), Throughput: i32(750)}, want: VolumeSettings{Type: "gp3", Size: 100, Iops: 3000, Throughput: 750}},
		{name: "gp2 rejects iops", req: requestedSettings{Type: "gp2", Size: 10, Iops: i32(100)}, wantCode: CodeInvalidParameterCombination},
		{name: "gp2 rejects throughput", req: requestedSettings{Type: "gp2", Size: 10, Throughput: i32(125)}, wantCode: CodeInvalidParameterCombination},
		{name: "io1 needs iops", req: requestedSettings{Type: "io1", Size: 10}, wantCode: CodeInvalidParameterCombination},
		{name: "io1", req: requestedSettings{Type: "io1", Size: 10, Iops: i32(500)}, want: VolumeSettings{Type: "io1", Size: 10, Iops: 500}},
		{name: "io1 50 per GiB", req: requestedSettings{Type: "io1", Size: 10, Iops: i32(501)}, wantCode: CodeInvalidParameterValue},
		{name: "io1 min size", req: requestedSettings{Type: "io1", Size: 3, Iops: i32(100)}, wantCode: CodeInvalidParameterValue},
		{name: "io1 max size", req: requestedSettings{Type: "io1", Size: 16385, Iops: i32(100)}, wantCode: CodeInvalidParameterValue},
		{name: "io1 iops below min", req: requestedSettings{Type: "io1", Size: 10, Iops: i32(99)}, wantCode: CodeInvalidParameterValue},
		{name: "io1 max iops", req: requestedSettings{Type: "io1", Size: 1280, Iops: i32(64000)}, want: VolumeSettings{Type: "io1", Size: 1280, Iops: 64000}},
		{name: "io1 above max iops", req: requestedSettings{Type: "io1", Size: 16000, Iops: i32(64001)}, wantCode: CodeInvalidParameterValue},
		{name: "io1 rejects throughput", req: requestedSettings{Type: "io1", Size: 10, Iops: i32(100), Throughput: i32(200)}, wantCode: CodeInvalidParameterCombination},
		{name: "io2 1000 per GiB", req: requestedSettings{Type: "io2", Size: 10, Iops: i32(10000)}, want: VolumeSettings{Type: "io2", Size: 10, Iops: 10000}},
		{name: "io2 above ratio", req: requestedSettings{Type: "io2", Size: 10, Iops: i32(10001)}, wantCode: CodeInvalidParameterValue},
		{name: "io2 max iops", req: requestedSettings{Type: "io2", Size: 256, Iops: i32(256000)}, want: VolumeSettings{Type: "io2", Size: 256, Iops: 256000}},
		{name: "io2 above max iops", req: requestedSettings{Type: "io2", Size: 1000, Iops: i32(256001)}, wantCode: CodeInvalidParameterValue},
		{name: "io2 max size", req: requestedSettings{Type: "io2", Size: 65536, Iops: i32(100)}, want: VolumeSettings{Type: "io2", Size: 65536, Iops: 100}},
		{name: "io2 multi-attach", req: requestedSettings{Type: "io2", Size: 10, Iops: i32(100), MultiAttach: bptr(true)}, want: VolumeSettings{Type: "io2", Size: 10, Iops: 100, MultiAttach: true}},
		{name: "io1 multi-attach", req: requestedSettings{Type: "io1", Size: 10, Iops: i32(100), MultiAttach: bptr(true)}, want: VolumeSettings{Type: "io1", Size: 10, Iops: 100, MultiAttach: true}},
		{name: "gp3 no multi-attach", req: requestedSettings{Type: "gp3", Size: 10, MultiAttach: bptr(true)}, wantCode: CodeInvalidParameterCombination},
		{name: "gp3 multi-attach false is fine", req: requestedSettings{Type: "gp3", Size: 10, MultiAttach: bptr(false)}, want: VolumeSettings{Type: "gp3", Size: 10, Iops: 3000, Throughput: 125}},
		{name: "st1 min size", req: requestedSettings{Type: "st1", Size: 124}, wantCode: CodeInvalidParameterValue},
		{name: "st1", req: requestedSettings{Type: "st1", Size: 125}, want: VolumeSettings{Type: "st1", Size: 125}},
		{name: "sc1 max size", req: requestedSettings{Type: "sc1", Size: 16385}, wantCode: CodeInvalidParameterValue},
		{name: "sc1 rejects iops", req: requestedSettings{Type: "sc1", Size: 500, Iops: i32(100)}, wantCode: CodeInvalidParameterCombination},
		{name: "standard max size", req: requestedSettings{Type: "standard", Size: 1025}, wantCode: CodeInvalidParameterValue},
		{name: "standard", req: requestedSettings{Type: "standard", Size: 1024}, want: VolumeSettings{Type: "standard", Size: 1024}},
		{name: "unknown type", req: requestedSettings{Type: "gp4", Size: 10}, wantCode: CodeUnknownVolumeType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := createSettings(tc.req)
			if c := errCode(err); c != tc.wantCode {
				t.Fatalf("createSettings(%+v) error = %v, want code %q", tc.req, err, tc.wantCode)
			}
			if err == nil && got != tc.want {
				t.Fatalf("createSettings(%+v) = %+v, want %+v", tc.req, got, tc.want)
			}
		})
	}
}

func TestModifySettings(t *testing.T) {
	gp3 := VolumeSettings{Type: "gp3", Size: 100, Iops: 4000, Throughput: 250}
	gp2 := VolumeSettings{Type: "gp2", Size: 100}
	io2 := VolumeSettings{Type: "io2", Size: 100, Iops: 5000}
	tests := []struct {
		name     string
		cur      VolumeSettings
		req      requestedSettings
		want     VolumeSettings
		wantCode string
	}{
		{name: "grow keeps the rest", cur: gp3, req: requestedSettings{Size: 200}, want: VolumeSettings{Type: "gp3", Size: 200, Iops: 4000, Throughput: 250}},
		{name: "shrink refused", cur: gp3, req: requestedSettings{Size: 99}, wantCode: CodeInvalidParameterValue},
		{name: "same size is no change", cur: gp3, req: requestedSettings{Size: 100}, want: gp3},
		{name: "iops only", cur: gp3, req: requestedSettings{Iops: i32(6000)}, want: VolumeSettings{Type: "gp3", Size: 100, Iops: 6000, Throughput: 250}},
		{name: "gp2 to gp3 gets gp3 defaults", cur: gp2, req: requestedSettings{Type: "gp3"}, want: VolumeSettings{Type: "gp3", Size: 100, Iops: 3000, Throughput: 125}},
		{name: "gp3 to gp2 drops iops and throughput", cur: gp3, req: requestedSettings{Type: "gp2"}, want: VolumeSettings{Type: "gp2", Size: 100}},
		{name: "gp3 to io2 defaults iops to 3000", cur: gp3, req: requestedSettings{Type: "io2"}, want: VolumeSettings{Type: "io2", Size: 100, Iops: 3000}},
		{name: "io2 to gp3 with throughput", cur: io2, req: requestedSettings{Type: "gp3", Throughput: i32(500)}, want: VolumeSettings{Type: "gp3", Size: 100, Iops: 3000, Throughput: 500}},
		{name: "throughput on io2 refused", cur: io2, req: requestedSettings{Throughput: i32(500)}, wantCode: CodeInvalidParameterCombination},
		{name: "iops on gp2 refused", cur: gp2, req: requestedSettings{Iops: i32(3000)}, wantCode: CodeInvalidParameterCombination},
		{name: "iops beyond ratio after grow", cur: gp3, req: requestedSettings{Size: 110, Iops: i32(60000)}, wantCode: CodeInvalidParameterValue},
		{name: "multi-attach on io2", cur: io2, req: requestedSettings{MultiAttach: bptr(true)}, want: VolumeSettings{Type: "io2", Size: 100, Iops: 5000, MultiAttach: true}},
		{name: "multi-attach on gp3 refused", cur: gp3, req: requestedSettings{MultiAttach: bptr(true)}, wantCode: CodeInvalidParameterCombination},
		{name: "multi-attach volume to gp3 refused", cur: VolumeSettings{Type: "io2", Size: 100, Iops: 5000, MultiAttach: true}, req: requestedSettings{Type: "gp3"}, wantCode: CodeInvalidParameterCombination},
		{name: "unknown target type", cur: gp3, req: requestedSettings{Type: "magnetic"}, wantCode: CodeUnknownVolumeType},
		{name: "to st1 needs its minimum size", cur: VolumeSettings{Type: "gp2", Size: 50}, req: requestedSettings{Type: "st1"}, wantCode: CodeInvalidParameterValue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := modifySettings(tc.cur, tc.req)
			if c := errCode(err); c != tc.wantCode {
				t.Fatalf("modifySettings(%+v, %+v) error = %v, want code %q", tc.cur, tc.req, err, tc.wantCode)
			}
			if err == nil && got != tc.want {
				t.Fatalf("modifySettings(%+v, %+v) = %+v, want %+v", tc.cur, tc.req, got, tc.want)
			}
		})
	}
}

func TestReportedIops(t *testing.T) {
	tests := []struct {
		s    VolumeSettings
		want int32
	}{
		{VolumeSettings{Type: "gp2", Size: 1}, 100},
		{VolumeSettings{Type: "gp2", Size: 100}, 300},
		{VolumeSettings{Type: "gp2", Size: 16384}, 16000},
		{VolumeSettings{Type: "gp3", Size: 100, Iops: 4000}, 4000},
		{VolumeSettings{Type: "st1", Size: 500}, 0},
	}
	for _, tc := range tests {
		if got := tc.s.ReportedIops(); got != tc.want {
			t.Errorf("ReportedIops(%+v) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

// errCode returns an *Error's code, "" for nil.
func errCode(e *Error) string {
	if e == nil {
		return ""
	}
	return e.Code
}
