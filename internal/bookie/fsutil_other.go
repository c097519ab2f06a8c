//go:build !linux

package bookie

import "github.com/cockroachdb/pebble/v2/vfs"

// dropCachedPages is a no-op where posix_fadvise is not available.
func dropCachedPages(vfs.File, int64, int64) {}

// adviseNoReadAhead is a no-op where posix_fadvise is not available.
func adviseNoReadAhead(vfs.File) {}
