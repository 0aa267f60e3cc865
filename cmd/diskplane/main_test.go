package main

import (
	"testing"
)

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{name: "version", args: []string{"--version"}, want: 0},
		{name: "help", args: []string{"--help"}, want: 0},
		{name: "unknown flag", args: []string{"--no-such-flag"}, want: 2},
		{name: "positional argument", args: []string{"controller"}, want: 2},
		{name: "bad mode", args: []string{"--mode=everything", "--endpoint=unix://" + t.TempDir() + "/csi.sock"}, want: 1},
		{name: "bad endpoint", args: []string{"--endpoint=/csi.sock"}, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(tc.args); got != tc.want {
				t.Fatalf("run(%v) = %d, want %d", tc.args, got, tc.want)
			}
		})
	}
}
