package csiproxy

import (
	"slices"
	"testing"
)

func TestVolumeIDsDropsEmptyOnes(t *testing.T) {
	const a, b = `\\?\Volume{a}\`, `\\?\Volume{b}\`
	for _, tc := range []struct {
		name string
		ids  []string
		want []string
	}{
		{name: "no answer", ids: nil, want: nil},
		{name: "PowerShell printed nothing", ids: []string{""}, want: nil},
		{name: "one volume", ids: []string{a}, want: []string{a}},
		{name: "two volumes", ids: []string{a, b}, want: []string{a, b}},
		{name: "an empty line among volumes", ids: []string{a, "", b}, want: []string{a, b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := volumeIDs(tc.ids); !slices.Equal(got, tc.want) {
				t.Errorf("volumeIDs(%q) = %q, want %q", tc.ids, got, tc.want)
			}
		})
	}
}
