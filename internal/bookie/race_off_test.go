//go:build !race

package bookie

// raceEnabled: the race detector slows the crash tests about tenfold.
const raceEnabled = false
