// Package directio holds the few pieces that writing a file with direct I/O
// (O_DIRECT) needs: block-aligned memory and switching a descriptor over.
// Callers keep their offsets and lengths multiples of BlockBytes.
//
// It owns nothing else and imports only the standard library and x/sys.
package directio

import "unsafe"

// BlockBytes is the alignment of memory, offsets and lengths under direct
// I/O. 4 KiB satisfies every logical block size Linux file systems use.
const BlockBytes = 4096

// Buffer returns n zeroed bytes at a block-aligned address.
func Buffer(n int) []byte {
	raw := make([]byte, n+BlockBytes)
	off := -int(uintptr(unsafe.Pointer(unsafe.SliceData(raw)))) & (BlockBytes - 1)
	return raw[off : off+n : off+n]
}

// Aligned reports whether b starts at a block-aligned address (an empty b
// does).
func Aligned(b []byte) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(BlockBytes-1) == 0
}
