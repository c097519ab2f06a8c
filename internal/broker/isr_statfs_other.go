//go:build !linux

package broker

// diskSpace is not read outside Linux: −1 (unknown) each.
func diskSpace(string) (total, usable int64) { return -1, -1 }
