//go:build race

package broker

// raceEnabled: the race detector slows byte-heavy work about tenfold, so
// the heaviest tests scale their volume down under it.
const raceEnabled = true
