package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"quire/internal/meta"
)

// TestMetaCluster runs three `quire meta` processes as one etcd cluster,
// writes through one member, reads through another, and survives the loss of
// one member.
func TestMetaCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	const n = 3
	var clients, peers, members []string
	for i := 0; i < n; i++ {
		clients = append(clients, freeAddr(t))
		peers = append(peers, freeAddr(t))
		members = append(members, fmt.Sprintf("m%d=http://%s", i, peers[i]))
	}
	procs := make([]*quireProcess, n)
	for i := 0; i < n; i++ {
		procs[i] = startQuire(t, "meta", "--data-dir", t.TempDir(), "--name", fmt.Sprintf("m%d", i),
			"--client-addr", clients[i], "--peer-addr", peers[i], "--initial-cluster", strings.Join(members, ","))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(i int) *meta.Etcd {
		s, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{"http://" + clients[i]}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s0, s2 := connect(0), connect(2)
	var v meta.Version
	for {
		var err error
		if v, err = s0.Create(ctx, "/cluster/k", []byte("v")); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("cluster never formed: %v\n%s", err, procs[0].output)
		}
	}
	kv, err := s2.Get(ctx, "/cluster/k")
	if err != nil || kv.Version != v {
		t.Fatalf("read through another member: %+v %v", kv, err)
	}
	// Lose one member: the other two still form a quorum.
	procs[0].cmd.Process.Signal(syscall.SIGKILL)
	// If the killed member led, the others elect a new leader first; a write
	// that timed out meanwhile may still have been applied.
	for {
		_, err := s2.Put(ctx, "/cluster/k", []byte("v2"), v)
		if err == nil {
			break
		}
		if kv, gerr := s2.Get(ctx, "/cluster/k"); gerr == nil && string(kv.Value) == "v2" {
			break
		}
		if !errors.Is(err, meta.ErrUnavailable) && !errors.Is(err, meta.ErrBadVersion) || ctx.Err() != nil {
			t.Fatalf("write with 2 of 3 members: %v", err)
		}
	}
}
