//go:build !race

package pulsartest_test

const raceEnabled = false
