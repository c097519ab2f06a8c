package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"quire/internal/meta"
)

func TestRegistration(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	ctx := context.Background()
	c1, c2, reader := srv.NewClient(), srv.NewClient(), srv.NewClient()
	s1, err := c1.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := Register(ctx, s1, Info{ID: "b1", Addr: "127.0.0.1:3181", Zone: "a"})
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := c2.NewSession(ctx, 5*time.Second)
	if _, err := Register(ctx, s2, Info{ID: "b1", Addr: "127.0.0.1:3999"}); !errors.Is(err, meta.ErrExists) {
		t.Fatalf("duplicate id: %v", err)
	}
	if _, err := Register(ctx, s2, Info{ID: "b0", Addr: "127.0.0.1:3182", Zone: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := r1.Update(ctx, func(i *Info) { i.ReadOnly = true }); err != nil {
		t.Fatal(err)
	}
	list, err := List(ctx, reader)
	if err != nil || len(list) != 2 || list[0].ID != "b0" || list[1].ID != "b1" || !list[1].ReadOnly || list[1].Zone != "a" {
		t.Fatalf("list = %+v %v", list, err)
	}
	// The bookie dies: its registration vanishes with its session.
	srv.ExpireSession(s1.ID())
	if _, err := Get(ctx, reader, "b1"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("after expiry: %v", err)
	}
	if err := r1.Update(ctx, func(i *Info) { i.ReadOnly = false }); err == nil {
		t.Fatal("update after the session expired succeeded")
	}
}
