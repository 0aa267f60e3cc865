package faults

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "zero value", cfg: Config{}},
		{name: "EC2 throttle", cfg: Config{Throttle: EC2Throttle()}},
		{name: "negative latency", cfg: Config{Latency: map[string]Duration{"CreateVolume": -1}}, wantErr: "negative"},
		{name: "empty bucket", cfg: Config{Throttle: Throttle{Enabled: true}}, wantErr: "positive size"},
		{name: "rule without action", cfg: Config{Errors: []ErrorRule{{Code: CodeInternalError, Probability: 1}}}, wantErr: "no action"},
		{name: "unknown code", cfg: Config{Errors: []ErrorRule{{Action: "*", Code: "Boom", Probability: 1}}}, wantErr: "want InternalError or Unavailable"},
		{name: "zero probability", cfg: Config{Errors: []ErrorRule{{Action: "*", Code: CodeUnavailable}}}, wantErr: "probability"},
		{name: "probability above one", cfg: Config{Errors: []ErrorRule{{Action: "*", Code: CodeUnavailable, Probability: 1.5}}}, wantErr: "probability"},
		{name: "negative count", cfg: Config{Errors: []ErrorRule{{Action: "*", Code: CodeUnavailable, Probability: 1, Count: -1}}}, wantErr: "negative count"},
		{name: "negative consistency", cfg: Config{EventualConsistency: -1}, wantErr: "negative"},
		{name: "negative stuck count", cfg: Config{StuckAttach: StuckAttach{Next: -1}}, wantErr: "negative"},
		{name: "commit-then-fail", cfg: Config{CommitThenFail: []CommitFailRule{{Action: "*", Mode: FailStall, Probability: 0.05, Stall: Duration(time.Second)}}}},
		{name: "commit-then-fail without action", cfg: Config{CommitThenFail: []CommitFailRule{{Mode: FailReset, Probability: 1}}}, wantErr: "no action"},
		{name: "commit-then-fail unknown mode", cfg: Config{CommitThenFail: []CommitFailRule{{Action: "*", Mode: "Explode", Probability: 1}}}, wantErr: "mode"},
		{name: "commit-then-fail probability", cfg: Config{CommitThenFail: []CommitFailRule{{Action: "*", Mode: FailReset}}}, wantErr: "probability"},
		{name: "commit-then-fail negative stall", cfg: Config{CommitThenFail: []CommitFailRule{{Action: "*", Mode: FailStall, Probability: 1, Stall: -1}}}, wantErr: "negative stall"},
		{name: "stale reads", cfg: Config{StaleReads: StaleReads{MaxLag: Duration(time.Second), Probability: 0.5}}},
		{name: "stale reads without probability", cfg: Config{StaleReads: StaleReads{MaxLag: Duration(time.Second)}}, wantErr: "both"},
		{name: "stale reads probability above one", cfg: Config{StaleReads: StaleReads{MaxLag: Duration(time.Second), Probability: 2}}, wantErr: "probability"},
		{name: "async failure", cfg: Config{AsyncFailures: []AsyncFailureRule{{Action: "CreateSnapshot", Probability: 1, Count: 1}}}},
		{name: "async failure of another action", cfg: Config{AsyncFailures: []AsyncFailureRule{{Action: "AttachVolume", Probability: 1}}}, wantErr: "want one of"},
		{name: "async failure negative count", cfg: Config{AsyncFailures: []AsyncFailureRule{{Action: "*", Probability: 1, Count: -1}}}, wantErr: "negative count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Validate = %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestDurationJSON(t *testing.T) {
	var c Config
	if err := json.Unmarshal([]byte(`{"latency":{"*":"150ms","AttachVolume":2000000000},"eventualConsistency":"2s"}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.Latency["*"] != Duration(150*time.Millisecond) || c.Latency["AttachVolume"] != Duration(2*time.Second) || c.EventualConsistency != Duration(2*time.Second) {
		t.Fatalf("decoded %+v", c)
	}
	b, err := json.Marshal(c)
	if err != nil || !strings.Contains(string(b), `"*":"150ms"`) || !strings.Contains(string(b), `"eventualConsistency":"2s"`) {
		t.Fatalf("encoded %s, %v", b, err)
	}
	if err := json.Unmarshal([]byte(`{"eventualConsistency":"soon"}`), &c); err == nil {
		t.Fatal("a bad duration was accepted")
	}
}

func mustNew(t *testing.T, cfg Config) *Faults {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func code(i *Injected) string {
	if i == nil {
		return ""
	}
	return i.Code
}

func TestErrorRules(t *testing.T) {
	f := mustNew(t, Config{Seed: 7, Errors: []ErrorRule{
		{Action: "CreateVolume", Code: CodeInternalError, Probability: 1, Count: 2},
		{Action: "*", Code: CodeUnavailable, Probability: 0.5},
	}})
	ctx := context.Background()
	for i := range 2 {
		if got := code(f.Before(ctx, "CreateVolume", Mutating)); got != CodeInternalError {
			t.Fatalf("call %d: %q, want InternalError", i, got)
		}
	}
	if n := len(f.Config().Errors); n != 1 {
		t.Fatalf("%d rules after the counted one was spent, want 1", n)
	}
	// The remaining rule fires about half the time.
	hits := 0
	for range 1000 {
		switch got := code(f.Before(ctx, "DescribeVolumes", Describe)); got {
		case CodeUnavailable:
			hits++
		case "":
		default:
			t.Fatalf("unexpected %q", got)
		}
	}
	if hits < 400 || hits > 600 {
		t.Fatalf("probability 0.5 fired %d times in 1000", hits)
	}
}

func TestRefusedActions(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"unauthorized", Config{Unauthorized: []string{"AttachVolume"}}, "UnauthorizedOperation"},
		// A cloud without the action: no IAM policy could allow it.
		{"unsupported", Config{Unsupported: []string{"AttachVolume"}, Unauthorized: []string{"*"}}, "InvalidAction"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustNew(t, tc.cfg)
			if got := code(f.Before(context.Background(), "AttachVolume", Mutating)); got != tc.want {
				t.Fatalf("AttachVolume: %q, want %q", got, tc.want)
			}
			if got, unauthorized := code(f.Before(context.Background(), "DetachVolume", Mutating)), len(tc.cfg.Unauthorized) > 0 && tc.cfg.Unauthorized[0] == "*"; (got != "") != unauthorized {
				t.Fatalf("DetachVolume: %q", got)
			}
		})
	}
}

func TestThrottleBuckets(t *testing.T) {
	f := mustNew(t, Config{Throttle: Throttle{
		Enabled:            true,
		Mutating:           Bucket{Size: 3, RefillPerSecond: 1},
		Describe:           Bucket{Size: 5, RefillPerSecond: 1},
		UnfilteredDescribe: Bucket{Size: 2, RefillPerSecond: 1},
	}})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.now = func() time.Time { return now }
	ctx := context.Background()
	count := func(action string, class Class, n int) int {
		ok := 0
		for range n {
			if f.Before(ctx, action, class) == nil {
				ok++
			}
		}
		return ok
	}
	if got := count("CreateVolume", Mutating, 10); got != 3 {
		t.Fatalf("CreateVolume allowed %d of 10, want the bucket size 3", got)
	}
	// Each action has its own bucket.
	if got := count("DeleteVolume", Mutating, 10); got != 3 {
		t.Fatalf("DeleteVolume allowed %d, want 3", got)
	}
	if got := count("DescribeVolumes", Describe, 10); got != 5 {
		t.Fatalf("DescribeVolumes allowed %d, want 5", got)
	}
	if got := count("DescribeVolumes", UnfilteredDescribe, 10); got != 2 {
		t.Fatalf("unfiltered DescribeVolumes allowed %d, want 2", got)
	}
	now = now.Add(2 * time.Second)
	if got := count("CreateVolume", Mutating, 10); got != 2 {
		t.Fatalf("after 2s refill CreateVolume allowed %d, want 2", got)
	}
	if got := f.Before(ctx, "CreateVolume", Mutating); got == nil || got.Code != "RequestLimitExceeded" {
		t.Fatalf("throttled answer %+v", got)
	}
}

func TestLatencyHonoursContext(t *testing.T) {
	f := mustNew(t, Config{Latency: map[string]Duration{"*": Duration(time.Hour)}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := f.Before(ctx, "DescribeVolumes", Describe); got != nil {
		t.Fatalf("cancelled request: %+v", got)
	}
}

func TestStickAttach(t *testing.T) {
	f := mustNew(t, Config{StuckAttach: StuckAttach{VolumeIDs: []string{"vol-a"}, Next: 2}})
	got := []bool{f.StickAttach("vol-a"), f.StickAttach("vol-b"), f.StickAttach("vol-c"), f.StickAttach("vol-d"), f.StickAttach("vol-a")}
	want := []bool{true, true, true, false, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("StickAttach sequence %v, want %v", got, want)
		}
	}
	if f.Config().StuckAttach.Next != 0 {
		t.Fatal("the Next count was not used up")
	}
}

func TestAfterCommit(t *testing.T) {
	f := mustNew(t, Config{CommitThenFail: []CommitFailRule{
		{Action: "CreateSnapshot", Mode: FailReset, Probability: 1, Count: 1},
		{Action: "*", Mode: FailUnavailable, Probability: 1, Stall: Duration(time.Second)},
	}})
	if got := f.AfterCommit("CreateSnapshot"); got == nil || got.Mode != FailReset || got.Stall != Duration(DefaultStall) {
		t.Fatalf("first CreateSnapshot: %+v, want a reset (with the default stall bound)", got)
	}
	if got := f.AfterCommit("CreateSnapshot"); got == nil || got.Mode != FailUnavailable || got.Stall != Duration(time.Second) {
		t.Fatalf("second CreateSnapshot: %+v, want the catch-all rule", got)
	}
	if n := len(f.Config().CommitThenFail); n != 1 {
		t.Fatalf("%d rules left, want the spent one gone", n)
	}
	if got := mustNew(t, Config{}).AfterCommit("CreateVolume"); got != nil {
		t.Fatalf("no rule: %+v", got)
	}
}

func TestFailAsync(t *testing.T) {
	f := mustNew(t, Config{UnusableKMSKeys: []string{"key-1"}, AsyncFailures: []AsyncFailureRule{{Action: "CreateSnapshot", Probability: 1, Count: 2}}})
	got := []bool{
		f.FailAsync("CreateVolume", "key-1"), f.FailAsync("CreateVolume", "key-2"), f.FailAsync("CreateVolume", ""),
		f.FailAsync("CreateSnapshot", ""), f.FailAsync("CreateSnapshot", ""), f.FailAsync("CreateSnapshot", ""),
	}
	want := []bool{true, false, false, true, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("FailAsync sequence %v, want %v", got, want)
		}
	}
}

func TestReadLagAndClock(t *testing.T) {
	if lag := mustNew(t, Config{}).ReadLag(); lag != 0 {
		t.Fatalf("lag %v without stale reads", lag)
	}
	f := mustNew(t, Config{Seed: 3, StaleReads: StaleReads{MaxLag: Duration(time.Second), Probability: 1}, ClockSkew: Duration(-time.Hour)})
	for range 100 {
		if lag := f.ReadLag(); lag <= 0 || lag > time.Second {
			t.Fatalf("lag %v, want within (0, 1s]", lag)
		}
	}
	if f.StaleWindow() != time.Second {
		t.Fatalf("stale window %v", f.StaleWindow())
	}
	if off := time.Until(f.Now()); off > -59*time.Minute || off < -61*time.Minute {
		t.Fatalf("the clock is %v off the host's, want an hour behind", off)
	}
}

func TestPatch(t *testing.T) {
	f := mustNew(t, Config{EventualConsistency: Duration(time.Second), Unauthorized: []string{"X"}})
	if err := f.Patch([]byte(`{"latency":{"CreateVolume":"10ms"}}`)); err != nil {
		t.Fatal(err)
	}
	c := f.Config()
	if c.Latency["CreateVolume"] != Duration(10*time.Millisecond) || f.Hide() != time.Second || len(c.Unauthorized) != 1 {
		t.Fatalf("after patch %+v", c)
	}
	if err := f.Patch([]byte(`{"errors":[{"action":"*","code":"Nope","probability":1}]}`)); err == nil {
		t.Fatal("an invalid patch was accepted")
	}
	if len(f.Config().Errors) != 0 {
		t.Fatal("an invalid patch changed the setting")
	}
	if err := f.Patch([]byte(`not json`)); err == nil {
		t.Fatal("a malformed patch was accepted")
	}
}
