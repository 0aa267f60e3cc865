package limits

import "testing"

// TestForInstanceType checks the table against the examples AWS gives on its
// volume limits page and against each rule of the table.
func TestForInstanceType(t *testing.T) {
	tests := []struct {
		instanceType string
		want         Limit
	}{
		// Shared Nitro pool.
		{"m5.large", Limit{28, Shared}},
		{"m5d.xlarge", Limit{28, Shared}},
		{"t3.micro", Limit{28, Shared}},
		{"c6gd.medium", Limit{28, Shared}},
		{"d3.8xlarge", Limit{28, Shared}},
		{"u-6tb1.56xlarge", Limit{28, Shared}},
		{"some-future.4xlarge", Limit{28, Shared}},
		{"", Limit{28, Shared}},
		// Bare metal and high memory metal.
		{"m5.metal", Limit{32, Shared}},
		{"i3.metal", Limit{32, Shared}},
		{"u-12tb1.metal", Limit{20, Shared}},
		// Special types.
		{"inf1.24xlarge", Limit{12, Shared}},
		{"inf1.xlarge", Limit{27, Shared}},
		{"g5.48xlarge", Limit{12, Shared}},
		{"mac1.metal", Limit{17, Shared}},
		{"mac2-m2pro.metal", Limit{11, Shared}},
		// Dedicated families, by size.
		{"m7i.large", Limit{32, Dedicated}},
		{"m7i-flex.xlarge", Limit{32, Dedicated}},
		{"c7a.medium", Limit{32, Dedicated}},
		{"r7iz.12xlarge", Limit{32, Dedicated}},
		{"r7i.16xlarge", Limit{48, Dedicated}},
		{"i7ie.18xlarge", Limit{48, Dedicated}},
		{"m7a.24xlarge", Limit{64, Dedicated}},
		{"r7a.32xlarge", Limit{88, Dedicated}},
		{"c7i.48xlarge", Limit{128, Dedicated}},
		{"u7i-12tb.224xlarge", Limit{128, Dedicated}},
		{"r7iz.metal-16xl", Limit{39, Dedicated}},
		{"m7i.metal-24xl", Limit{39, Dedicated}},
		{"r7iz.metal-32xl", Limit{79, Dedicated}},
		{"m7a.metal-48xl", Limit{79, Dedicated}},
		{"G6.XLARGE", Limit{32, Dedicated}},
		{"p5.48xlarge", Limit{64, Dedicated}},
		{"hpc7a.96xlarge", Limit{27, Dedicated}},
		// A dedicated family with a size the rule cannot read falls back to
		// the shared bare metal / shared pool rules.
		{"m7i.metal", Limit{32, Shared}},
		{"m7i.weird", Limit{28, Shared}},
		// Xen.
		{"m4.large", Limit{40, Xen}},
		{"t2.micro", Limit{40, Xen}},
		{"i3.16xlarge", Limit{40, Xen}},
		{"p3.2xlarge", Limit{40, Xen}},
		{"p3dn.24xlarge", Limit{28, Shared}},
	}
	for _, tc := range tests {
		if got := ForInstanceType(tc.instanceType); got != tc.want {
			t.Errorf("ForInstanceType(%q) = %+v, want %+v", tc.instanceType, got, tc.want)
		}
	}
}

// TestAvailable replays AWS's worked examples and the adjustments the node
// makes for what the instance already uses.
func TestAvailable(t *testing.T) {
	tests := []struct {
		name  string
		limit Limit
		usage Usage
		want  int
	}{
		// "If you have no additional network interface attachments on an
		// m5.xlarge, you can attach up to 27 EBS volumes" (root included).
		{"m5.xlarge, one interface", ForInstanceType("m5.xlarge"), Usage{Volumes: 1, NetworkInterfaces: 1}, 26},
		// "...two additional network interfaces: 25 EBS volumes".
		{"m5.xlarge, three interfaces", ForInstanceType("m5.xlarge"), Usage{Volumes: 1, NetworkInterfaces: 3}, 24},
		// "...m5d.xlarge with one NVMe instance store volume and two
		// additional interfaces: 24 EBS volumes".
		{"m5d.xlarge", ForInstanceType("m5d.xlarge"), Usage{Volumes: 1, NetworkInterfaces: 3, InstanceStoreVolumes: 1}, 23},
		// d3.8xlarge: 3 EBS volumes with its 24 instance store disks.
		{"d3.8xlarge", ForInstanceType("d3.8xlarge"), Usage{Volumes: 1, NetworkInterfaces: 1, InstanceStoreVolumes: 24}, 2},
		{"inf1.24xlarge", ForInstanceType("inf1.24xlarge"), Usage{Volumes: 1, NetworkInterfaces: 1}, 10},
		{"g5.48xlarge", ForInstanceType("g5.48xlarge"), Usage{Volumes: 1, NetworkInterfaces: 1, InstanceStoreVolumes: 2}, 8},
		{"no interface reported still counts one", ForInstanceType("m5.large"), Usage{Volumes: 1}, 26},
		{"dedicated ignores interfaces and instance store", ForInstanceType("m7i.large"), Usage{Volumes: 2, NetworkInterfaces: 4, InstanceStoreVolumes: 2}, 30},
		{"xen: 39 besides the root volume", ForInstanceType("m4.large"), Usage{Volumes: 1, NetworkInterfaces: 2}, 39},
		{"xen counts instance store", ForInstanceType("c3.large"), Usage{Volumes: 1, InstanceStoreVolumes: 2}, 37},
		{"never below one", ForInstanceType("m5.large"), Usage{Volumes: 20, NetworkInterfaces: 15}, 1},
		{"reserved zero", Limit{Slots: 32, Kind: Dedicated}, Usage{}, 32},
	}
	for _, tc := range tests {
		if got := tc.limit.Available(tc.usage); got != tc.want {
			t.Errorf("%s: %+v.Available(%+v) = %d, want %d", tc.name, tc.limit, tc.usage, got, tc.want)
		}
	}
}

// TestTableConsistency guards the data against typos: every entry must be
// usable and no family may be both Xen and dedicated.
func TestTableConsistency(t *testing.T) {
	for name, l := range typeLimits {
		if l.Slots < 2 || (l.Kind != Shared && l.Kind != Dedicated && l.Kind != Xen) {
			t.Errorf("typeLimits[%q] = %+v is not a usable limit", name, l)
		}
	}
	for family := range dedicatedFamilies {
		if xenFamilies[family] {
			t.Errorf("family %q is listed both as Xen and as dedicated", family)
		}
	}
	for i := 1; i < len(dedicatedBySize); i++ {
		prev, row := dedicatedBySize[i-1], dedicatedBySize[i]
		if row.minSize <= prev.minSize || row.slots <= prev.slots {
			t.Errorf("dedicatedBySize must ascend: row %d %+v after %+v", i, row, prev)
		}
	}
}
