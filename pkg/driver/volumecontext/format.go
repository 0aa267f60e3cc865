package volumecontext

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// FormatOptions are the mkfs settings a volume asks for. A zero field means
// "mkfs's own default".
type FormatOptions struct {
	// BlockSize is the filesystem block size in bytes.
	BlockSize int64
	// InodeSize is the size of one inode in bytes.
	InodeSize int64
	// BytesPerInode makes one inode per this many bytes (ext3/ext4 only).
	BytesPerInode int64
	// NumberOfInodes is the exact inode count (ext3/ext4 only); mkfs lets it
	// win over BytesPerInode when both are set.
	NumberOfInodes int64
	// Ext4BigAlloc turns on cluster allocation (ext4 only).
	Ext4BigAlloc bool
	// Ext4ClusterSize is the cluster size in bytes; it needs Ext4BigAlloc.
	Ext4ClusterSize int64
}

// sizeRule says which filesystems accept a numeric option and which values
// make sense. The bounds are mkfs's own, so a value that passes here is not
// refused later by mkfs on the node, where the user would only see a pod
// stuck in ContainerCreating.
type sizeRule struct {
	key        string
	fsTypes    []string
	min, max   int64
	powerOfTwo bool
	field      func(*FormatOptions) *int64
}

var sizeRules = []sizeRule{
	{key: BlockSizeKey, fsTypes: []string{FSTypeExt3, FSTypeExt4, FSTypeXFS}, min: 1024, max: 65536, powerOfTwo: true,
		field: func(o *FormatOptions) *int64 { return &o.BlockSize }},
	{key: InodeSizeKey, fsTypes: []string{FSTypeExt3, FSTypeExt4}, min: 128, max: 65536, powerOfTwo: true,
		field: func(o *FormatOptions) *int64 { return &o.InodeSize }},
	{key: InodeSizeKey, fsTypes: []string{FSTypeXFS}, min: 256, max: 2048, powerOfTwo: true,
		field: func(o *FormatOptions) *int64 { return &o.InodeSize }},
	{key: BytesPerInodeKey, fsTypes: []string{FSTypeExt3, FSTypeExt4}, min: 1024, max: 64 << 20,
		field: func(o *FormatOptions) *int64 { return &o.BytesPerInode }},
	{key: NumberOfInodesKey, fsTypes: []string{FSTypeExt3, FSTypeExt4}, min: 1, max: 1<<32 - 1,
		field: func(o *FormatOptions) *int64 { return &o.NumberOfInodes }},
	{key: Ext4ClusterSizeKey, fsTypes: []string{FSTypeExt4}, min: 2048, max: 256 << 20, powerOfTwo: true,
		field: func(o *FormatOptions) *int64 { return &o.Ext4ClusterSize }},
}

// formatKeys are every key ParseFormatOptions reads, for matching the
// caller's keys without regard to case.
var formatKeys = []string{BlockSizeKey, InodeSizeKey, BytesPerInodeKey, NumberOfInodesKey, Ext4BigAllocKey, Ext4ClusterSizeKey}

// ParseFormatOptions reads the format options out of params (a volume
// context or StorageClass parameters; keys match without regard to case, as
// StorageClass keys do, and keys that are not format options are ignored)
// and checks them against fsType (empty means the default). The error names
// the offending key and says what would be accepted.
func ParseFormatOptions(params map[string]string, fsType string) (FormatOptions, error) {
	var opts FormatOptions
	fs, err := NormalizeFSType(fsType)
	if err != nil {
		return opts, err
	}
	values, err := pickFormatKeys(params)
	if err != nil {
		return opts, err
	}
	for _, rule := range sizeRules {
		raw, ok := values[rule.key]
		if !ok || !slices.Contains(rule.fsTypes, fs) {
			continue
		}
		n, err := parseSize(rule, raw)
		if err != nil {
			return FormatOptions{}, err
		}
		*rule.field(&opts) = n
		delete(values, rule.key)
	}
	if raw, ok := values[Ext4BigAllocKey]; ok && fs == FSTypeExt4 {
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return FormatOptions{}, fmt.Errorf("%s: want true or false, not %q", Ext4BigAllocKey, raw)
		}
		opts.Ext4BigAlloc = b
		delete(values, Ext4BigAllocKey)
	}
	// Whatever is left was given for a filesystem that has no such option.
	for _, key := range formatKeys {
		if _, ok := values[key]; ok {
			return FormatOptions{}, fmt.Errorf("%s cannot be used with filesystem type %s", key, fs)
		}
	}
	if err := opts.checkCombinations(); err != nil {
		return FormatOptions{}, err
	}
	return opts, nil
}

// pickFormatKeys returns the format options in params under their canonical
// key names. Two spellings of one key are refused: which one wins would be a
// guess.
func pickFormatKeys(params map[string]string) (map[string]string, error) {
	values := map[string]string{}
	for k, v := range params {
		for _, key := range formatKeys {
			if !strings.EqualFold(k, key) {
				continue
			}
			if _, dup := values[key]; dup {
				return nil, fmt.Errorf("%s is given more than once (keys differ only in case)", key)
			}
			values[key] = v
		}
	}
	return values, nil
}

func parseSize(rule sizeRule, raw string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
	if err != nil || n < rule.min || n > rule.max {
		return 0, fmt.Errorf("%s: want a whole number of bytes from %d to %d, not %q", rule.key, rule.min, rule.max, raw)
	}
	if rule.powerOfTwo && bits.OnesCount64(uint64(n)) != 1 {
		return 0, fmt.Errorf("%s: want a power of two (e.g. 1024, 2048, 4096), not %q", rule.key, raw)
	}
	return n, nil
}

// checkCombinations refuses option sets each of which is fine alone but
// which mkfs would reject together.
func (o FormatOptions) checkCombinations() error {
	if o.Ext4ClusterSize != 0 && !o.Ext4BigAlloc {
		return fmt.Errorf("%s needs %s=true", Ext4ClusterSizeKey, Ext4BigAllocKey)
	}
	if o.BlockSize != 0 && o.Ext4ClusterSize != 0 && o.Ext4ClusterSize < o.BlockSize {
		return fmt.Errorf("%s (%d) must not be smaller than %s (%d)", Ext4ClusterSizeKey, o.Ext4ClusterSize, BlockSizeKey, o.BlockSize)
	}
	if o.BlockSize != 0 && o.InodeSize > o.BlockSize {
		return fmt.Errorf("%s (%d) must not be larger than %s (%d)", InodeSizeKey, o.InodeSize, BlockSizeKey, o.BlockSize)
	}
	return nil
}

// VolumeContext renders the options that are set under their canonical
// keys, for the controller to put into the volume context of a new volume.
func (o FormatOptions) VolumeContext() map[string]string {
	ctx := map[string]string{}
	put := func(key string, n int64) {
		if n != 0 {
			ctx[key] = strconv.FormatInt(n, 10)
		}
	}
	put(BlockSizeKey, o.BlockSize)
	put(InodeSizeKey, o.InodeSize)
	put(BytesPerInodeKey, o.BytesPerInode)
	put(NumberOfInodesKey, o.NumberOfInodes)
	if o.Ext4BigAlloc {
		ctx[Ext4BigAllocKey] = "true"
	}
	put(Ext4ClusterSizeKey, o.Ext4ClusterSize)
	return ctx
}

// MkfsArgs returns the options to pass to mkfs.<fsType> before the device
// name. It assumes the options were parsed for the same fsType.
func (o FormatOptions) MkfsArgs(fsType string) []string {
	var args []string
	add := func(flag string, n int64, format string) {
		if n != 0 {
			args = append(args, flag, fmt.Sprintf(format, n))
		}
	}
	if fsType == FSTypeXFS {
		add("-b", o.BlockSize, "size=%d")
		add("-i", o.InodeSize, "size=%d")
		return args
	}
	if !isExt(fsType) {
		return nil
	}
	add("-b", o.BlockSize, "%d")
	add("-I", o.InodeSize, "%d")
	add("-i", o.BytesPerInode, "%d")
	add("-N", o.NumberOfInodes, "%d")
	if o.Ext4BigAlloc {
		args = append(args, "-O", "bigalloc")
	}
	add("-C", o.Ext4ClusterSize, "%d")
	return args
}
