package testutil

import (
	"net"
	"sync"
	"testing"
)

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// FreePort is a loopback port nothing listens on, never one it has returned
// before in this test binary. A probed port is free again once its listener
// closes and the kernel may hand it out twice in a row: two calls for one
// etcd member's peer URL and another's gave the same port.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !portsGiven[port] {
			portsGiven[port] = true
			return port
		}
	}
}
