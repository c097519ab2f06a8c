//go:build !linux

package lowprio

import "errors"

func lower() error { return nil }

func threadID() int { return 0 }

// CurrentNice is Linux's.
func CurrentNice() (int, error) { return 0, errors.ErrUnsupported }
