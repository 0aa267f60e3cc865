// Package mountertest makes real volumes for tests that exercise the node's
// OS work as root: a sparse file named like the EC2 emulator's volume files
// (<dir>/volumes/vol-….img), a loop device over it, and the by-id link a
// Nitro instance would have, in a directory the test owns. Everything it
// makes, and anything still mounted from the device, is removed when the
// test ends, pass or fail.
package mountertest
