package wcow

import (
	"encoding/binary"
	"time"
	"unicode/utf16"
)

// The registry hive file format ("regf"), as far as a hive of one empty key
// needs it. A hive file is a 4 KiB base block (the header) followed by hive
// bins of 4 KiB multiples that hold cells; a cell's offset counts from the
// first bin, and its size is negative while it is allocated.
const (
	hiveBaseBlockSize = 4096
	hiveBinSize       = 4096
	hiveBinHeaderSize = 32
	// hiveChecksumOffset is where the base block keeps the XOR of the 32-bit
	// words before it.
	hiveChecksumOffset = 0x1fc
	// hiveNoCell marks an absent list or class name in a key.
	hiveNoCell = 0xffffffff
	// Key flags: the hive's root key, which cannot be deleted, with an ASCII
	// name.
	keyHiveEntry = 0x0004
	keyNoDelete  = 0x0008
	keyCompName  = 0x0020
)

// HiveNames are the registry hives a Windows base layer carries in
// Windows\System32\config. Importing a base layer hands them to the Host
// Compute Service, which links them into the layer's Hives directory for the
// layers above it; the HostProcess base image carries each as a hive of one
// empty key.
var HiveNames = []string{"DEFAULT", "SAM", "SECURITY", "SOFTWARE", "SYSTEM"}

// filetime converts t to a Windows FILETIME: 100-nanosecond intervals since
// 1601-01-01 UTC.
func filetime(t time.Time) uint64 {
	const unixEpochAsFiletime = 116444736000000000
	return uint64(t.UnixNano()/100 + unixEpochAsFiletime)
}

// MinimalHive returns a registry hive file (format version 1.3, one 4 KiB
// bin) whose only content is an empty root key named name, written at
// mtime. The key's security descriptor lets Administrators and SYSTEM do
// anything and Users read.
func MinimalHive(name string, mtime time.Time) []byte {
	le := binary.LittleEndian
	ft := filetime(mtime)
	file := make([]byte, hiveBaseBlockSize+hiveBinSize)

	// The cells, at their offsets from the start of the bin: the root key,
	// then its security cell, then one free cell to the end of the bin.
	rootOffset := uint32(hiveBinHeaderSize)
	key := keyCell(name, ft)
	skOffset := rootOffset + uint32(len(key))
	le.PutUint32(key[4+0x2c:], skOffset)
	sk := securityCell(skOffset, keySecurityDescriptor())
	freeOffset := skOffset + uint32(len(sk))

	bin := file[hiveBaseBlockSize:]
	copy(bin, "hbin")
	le.PutUint32(bin[4:], 0) // this bin's offset from the first
	le.PutUint32(bin[8:], hiveBinSize)
	le.PutUint64(bin[20:], ft)
	copy(bin[rootOffset:], key)
	copy(bin[skOffset:], sk)
	le.PutUint32(bin[freeOffset:], hiveBinSize-freeOffset) // positive: free

	base := file[:hiveBaseBlockSize]
	copy(base, "regf")
	le.PutUint32(base[0x04:], 1) // primary and secondary sequence numbers:
	le.PutUint32(base[0x08:], 1) // equal, the hive was written completely
	le.PutUint64(base[0x0c:], ft)
	le.PutUint32(base[0x14:], 1) // major version
	le.PutUint32(base[0x18:], 3) // minor version
	le.PutUint32(base[0x1c:], 0) // a primary hive file
	le.PutUint32(base[0x20:], 1) // laid out as it is loaded into memory
	le.PutUint32(base[0x24:], rootOffset)
	le.PutUint32(base[0x28:], hiveBinSize) // the bins' total size
	le.PutUint32(base[0x2c:], 1)           // clustering factor
	// The file name, UTF-16, at most 31 characters and a terminator.
	for i, c := range utf16.Encode([]rune(name)) {
		if i == 31 {
			break
		}
		le.PutUint16(base[0x30+2*i:], c)
	}
	le.PutUint32(base[hiveChecksumOffset:], HiveChecksum(base))
	return file
}

// HiveChecksum is the checksum of a hive's base block: the XOR of its first
// 127 little-endian 32-bit words, except that 0 becomes 1 and 0xffffffff
// becomes 0xfffffffe.
func HiveChecksum(base []byte) uint32 {
	var sum uint32
	for off := 0; off < hiveChecksumOffset; off += 4 {
		sum ^= binary.LittleEndian.Uint32(base[off:])
	}
	switch sum {
	case 0:
		return 1
	case 0xffffffff:
		return 0xfffffffe
	}
	return sum
}

// cell returns an allocated cell holding content: its size (negative, the
// cell being in use) and the content, padded to a multiple of 8 bytes.
func cell(content []byte) []byte {
	size := (4 + len(content) + 7) &^ 7
	c := make([]byte, size)
	binary.LittleEndian.PutUint32(c, uint32(-int32(size)))
	copy(c[4:], content)
	return c
}

// keyCell returns the cell of a hive's root key ("nk") named name, with no
// subkeys, values or class name. The caller fills in its security cell's
// offset (at 0x2c in the content).
func keyCell(name string, ft uint64) []byte {
	le := binary.LittleEndian
	k := make([]byte, 0x4c+len(name))
	copy(k, "nk")
	le.PutUint16(k[0x02:], keyHiveEntry|keyNoDelete|keyCompName)
	le.PutUint64(k[0x04:], ft)
	// 0x0c access bits and 0x10 parent: 0 (the root's parent lies outside
	// the hive); 0x14 and 0x18: no subkeys, stable or volatile.
	le.PutUint32(k[0x1c:], hiveNoCell) // subkey list
	le.PutUint32(k[0x20:], hiveNoCell) // volatile subkey list
	// 0x24: no values.
	le.PutUint32(k[0x28:], hiveNoCell) // value list
	le.PutUint32(k[0x30:], hiveNoCell) // class name
	// 0x34 to 0x47: the largest subkey name, class name, value name and
	// value data lengths, and a work variable: all 0.
	le.PutUint16(k[0x48:], uint16(len(name)))
	copy(k[0x4c:], name)
	return cell(k)
}

// securityCell returns a security cell ("sk") at offset self holding
// descriptor, the only one of its hive: its list links point to itself and
// one key uses it.
func securityCell(self uint32, descriptor []byte) []byte {
	le := binary.LittleEndian
	s := make([]byte, 0x14+len(descriptor))
	copy(s, "sk")
	le.PutUint32(s[0x04:], self) // next security cell
	le.PutUint32(s[0x08:], self) // previous security cell
	le.PutUint32(s[0x0c:], 1)    // keys that use it
	le.PutUint32(s[0x10:], uint32(len(descriptor)))
	copy(s[0x14:], descriptor)
	return cell(s)
}

// Well-known security identifiers, as (authority, subauthorities).
var (
	sidAdministrators = sid{5, []uint32{32, 544}} // BUILTIN\Administrators
	sidUsers          = sid{5, []uint32{32, 545}} // BUILTIN\Users
	sidSystem         = sid{5, []uint32{18}}      // NT AUTHORITY\SYSTEM
)

// sid is a security identifier S-1-authority-subauthorities.
type sid struct {
	authority      uint64
	subauthorities []uint32
}

// bytes is the binary form of s: revision 1, the number of
// subauthorities, the authority (48 bits, big-endian), the subauthorities
// (32 bits each, little-endian).
func (s sid) bytes() []byte {
	b := make([]byte, 8+4*len(s.subauthorities))
	b[0] = 1
	b[1] = byte(len(s.subauthorities))
	for i := range 6 {
		b[2+i] = byte(s.authority >> (8 * (5 - i)))
	}
	for i, sa := range s.subauthorities {
		binary.LittleEndian.PutUint32(b[8+4*i:], sa)
	}
	return b
}

// Registry access rights.
const (
	keyAllAccess = 0xf003f
	keyRead      = 0x20019
)

// keySecurityDescriptor is a self-relative security descriptor: owner
// Administrators, group SYSTEM, and a discretionary ACL, inherited by
// subkeys, that allows Administrators and SYSTEM all access and Users read
// access.
func keySecurityDescriptor() []byte {
	const (
		sdSelfRelative        = 0x8000
		sdDACLPresent         = 0x0004
		aceAccessAllowed      = 0
		aceContainerInherit   = 0x02
		aclRevision           = 2
		descriptorHeaderBytes = 20
	)
	le := binary.LittleEndian
	aces := []struct {
		who  sid
		mask uint32
	}{
		{sidAdministrators, keyAllAccess},
		{sidSystem, keyAllAccess},
		{sidUsers, keyRead},
	}
	acl := make([]byte, 8) // the ACL header, filled in below
	for _, a := range aces {
		id := a.who.bytes()
		ace := make([]byte, 8+len(id))
		ace[0] = aceAccessAllowed
		ace[1] = aceContainerInherit
		le.PutUint16(ace[2:], uint16(len(ace)))
		le.PutUint32(ace[4:], a.mask)
		copy(ace[8:], id)
		acl = append(acl, ace...)
	}
	acl[0] = aclRevision
	le.PutUint16(acl[2:], uint16(len(acl)))
	le.PutUint16(acl[4:], uint16(len(aces)))

	owner, group := sidAdministrators.bytes(), sidSystem.bytes()
	sd := make([]byte, descriptorHeaderBytes)
	sd[0] = 1 // revision
	le.PutUint16(sd[2:], sdSelfRelative|sdDACLPresent)
	le.PutUint32(sd[16:], uint32(len(sd))) // the DACL follows the header
	sd = append(sd, acl...)
	le.PutUint32(sd[4:], uint32(len(sd))) // then the owner
	sd = append(sd, owner...)
	le.PutUint32(sd[8:], uint32(len(sd))) // then the group; no SACL (12)
	sd = append(sd, group...)
	return sd
}
