//go:build race

package pulsartest_test

// raceEnabled: some client paths race inside pulsar-client-go itself, so
// tests avoid them under the race detector.
const raceEnabled = true
