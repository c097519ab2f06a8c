//go:build !linux

package meta

import "errors"

// diskSpace is unknown here: the ballast is never released or restored.
func diskSpace(string) (free, total uint64, err error) {
	return 0, 0, errors.New("meta: disk space unknown on this platform")
}
