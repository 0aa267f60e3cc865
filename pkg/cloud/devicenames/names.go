// Package devicenames chooses the device name (for example /dev/xvdba) under
// which EC2 attaches a volume to an instance.
//
// EC2 leaves the choice to the caller and refuses a name that the instance
// already uses, so the controller must know which names are taken: those in
// the instance's block-device mapping (from DescribeInstances) and those that
// other attaches to the same instance are about to use but EC2 does not list
// yet. A name EC2 still rejects as in use (an AMI mapping EC2 does not report,
// or a device the guest has not released) is avoided for a while. Names are
// handed out round-robin, so a name freed by a detach is not reused at once:
// reusing a name the guest still holds is a known cause of volumes stuck in
// "attaching".
package devicenames

import "strings"

// devicePrefix is the directory every candidate name lives in.
const devicePrefix = "/dev/"

// preferred are the names tried first, in this order: /dev/xvd[a,b,d][a-z]
// and then /dev/xvd[e-z]. They are all valid for HVM instances, and none of
// them collides with a root device (/dev/xvda, /dev/sda1) or with the names
// EC2 uses for instance store (/dev/sd[b-e]).
var preferred = buildPreferred()

// fallback are valid names used only when every preferred name is taken:
// /dev/xvdc[a-z] is refused by some Windows instance types, so it comes last.
var fallback = buildFallback()

func buildPreferred() []string {
	var names []string
	for _, second := range "abd" {
		for c := 'a'; c <= 'z'; c++ {
			names = append(names, devicePrefix+"xvd"+string(second)+string(c))
		}
	}
	for c := 'e'; c <= 'z'; c++ {
		names = append(names, devicePrefix+"xvd"+string(c))
	}
	return names
}

func buildFallback() []string {
	var names []string
	for c := 'a'; c <= 'z'; c++ {
		names = append(names, devicePrefix+"xvdc"+string(c))
	}
	return names
}

// Candidates returns every name the allocator can hand out, preferred names
// first. It is a copy; callers may keep or change it.
func Candidates() []string {
	return append(append([]string(nil), preferred...), fallback...)
}

// canonical maps the ways one device name is written to one key: with or
// without "/dev/", and "sdX" for "xvdX" (on HVM instances the kernel exposes
// /dev/sdf as /dev/xvdf, and EC2 treats them as the same slot).
func canonical(name string) string {
	n := strings.TrimPrefix(name, devicePrefix)
	if rest, ok := strings.CutPrefix(n, "sd"); ok {
		n = "xvd" + rest
	}
	return n
}
