package meta

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

// harness adapts one Store implementation to the conformance suite.
type harness struct {
	// newClient returns a fresh client (a new "process"); the suite closes it.
	newClient func(t *testing.T) Store
	// killOwner starts an owner outside the test's control that creates an
	// ephemeral key in a session of the given TTL, then kills it without any
	// goodbye (SIGKILL for real processes). It returns once the key exists and
	// the owner is dead.
	killOwner func(t *testing.T, key string, ttl time.Duration)
	// expire makes the store expire a session as if its keep-alives had stopped.
	expire func(t *testing.T, s Session)
	// compact drops the store's history up to rev.
	compact func(t *testing.T, rev int64)
	// disrupt breaks every client's connection (server restart or network
	// blip); clients must reconnect by themselves.
	disrupt func(t *testing.T)
	// restart restarts the store keeping its data (server process restart);
	// after it, clients from newClient talk to the restarted store.
	restart func(t *testing.T)
}

func runConformance(t *testing.T, h harness) {
	t.Run("CRUD", func(t *testing.T) { testCRUD(t, h) })
	t.Run("List", func(t *testing.T) { testList(t, h) })
	t.Run("CASRace", func(t *testing.T) { testCASRace(t, h) })
	t.Run("Sessions", func(t *testing.T) { testSessions(t, h) })
	t.Run("EphemeralOwnerKilled", func(t *testing.T) { testEphemeralOwnerKilled(t, h) })
	t.Run("Watch", func(t *testing.T) { testWatch(t, h) })
	t.Run("WatchCompacted", func(t *testing.T) { testWatchCompacted(t, h) })
	t.Run("WatchAcrossReconnect", func(t *testing.T) { testWatchAcrossReconnect(t, h) })
	t.Run("AllocateID", func(t *testing.T) { testAllocateID(t, h) })
}

func client(t *testing.T, h harness) Store {
	t.Helper()
	s := h.newClient(t)
	t.Cleanup(func() { s.Close() })
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testCRUD(t *testing.T, h harness) {
	ctx, s := testCtx(t), client(t, h)
	key := "/crud/" + t.Name()
	if _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get absent: %v, want ErrNotFound", err)
	}
	v1, err := s.Create(ctx, key, []byte("one"))
	if err != nil || v1 == 0 {
		t.Fatalf("create: %v %v", v1, err)
	}
	if _, err := s.Create(ctx, key, []byte("again")); !errors.Is(err, ErrExists) {
		t.Fatalf("create twice: %v, want ErrExists", err)
	}
	kv, err := s.Get(ctx, key)
	if err != nil || string(kv.Value) != "one" || kv.Version != v1 {
		t.Fatalf("get = %+v %v, want one@%d", kv, err, v1)
	}
	if _, err := s.Put(ctx, key, []byte("x"), v1+1000); !errors.Is(err, ErrBadVersion) {
		t.Fatalf("put stale: %v, want ErrBadVersion", err)
	}
	if _, err := s.Put(ctx, key+"/absent", []byte("x"), 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("put absent: %v, want ErrNotFound", err)
	}
	v2, err := s.Put(ctx, key, []byte("two"), v1)
	if err != nil || v2 <= v1 {
		t.Fatalf("put: %v %v (v1 %d)", v2, err, v1)
	}
	if err := s.Delete(ctx, key, v1); !errors.Is(err, ErrBadVersion) {
		t.Fatalf("delete stale: %v, want ErrBadVersion", err)
	}
	if err := s.Delete(ctx, key, v2); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := s.Delete(ctx, key, v2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete absent: %v, want ErrNotFound", err)
	}
	// Versions never repeat, even for a re-created key: no ABA.
	v3, err := s.Create(ctx, key, []byte("three"))
	if err != nil || v3 <= v2 {
		t.Fatalf("re-create: %v %v (v2 %d)", v3, err, v2)
	}
	if _, err := s.Put(ctx, key, []byte("x"), v1); !errors.Is(err, ErrBadVersion) {
		t.Fatalf("put with the first incarnation's version: %v, want ErrBadVersion", err)
	}
}

func testList(t *testing.T, h harness) {
	ctx, s := testCtx(t), client(t, h)
	prefix := "/list/" + t.Name() + "/"
	var want []string
	for i := 0; i < 25; i++ {
		k := fmt.Sprintf("%sk%02d", prefix, (i*7)%25) // created out of order
		if _, err := s.Create(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	// A sibling prefix that shares the leading bytes must not leak in.
	if _, err := s.Create(ctx, prefix[:len(prefix)-1]+"x/other", nil); err != nil {
		t.Fatal(err)
	}
	sort.Strings(want)
	var got []string
	after := ""
	pages := 0
	for {
		res, err := s.List(ctx, prefix, ListOptions{After: after, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, kv := range res.KVs {
			got = append(got, kv.Key)
			if string(kv.Value) != kv.Key || kv.Version == 0 {
				t.Fatalf("kv %+v", kv)
			}
		}
		if res.Revision == 0 {
			t.Fatal("list revision 0")
		}
		if !res.More {
			break
		}
		after = res.KVs[len(res.KVs)-1].Key
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || pages != 3 {
		t.Fatalf("pages %d\n got %v\nwant %v", pages, got, want)
	}
}

// testCASRace: N goroutines race a compare-and-swap on one key from the same
// version; exactly one wins each round.
func testCASRace(t *testing.T, h harness) {
	ctx := testCtx(t)
	const racers, rounds = 16, 20
	clients := make([]Store, 4)
	for i := range clients {
		clients[i] = client(t, h)
	}
	key := "/cas/" + t.Name()
	if _, err := clients[0].Create(ctx, key, []byte("0")); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < rounds; round++ {
		kv, err := clients[0].Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]error, racers)
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				_, results[i] = clients[i%len(clients)].Put(ctx, key, []byte(fmt.Sprintf("r%d-w%d", round, i)), kv.Version)
			}(i)
		}
		close(start)
		wg.Wait()
		winners := 0
		for i, err := range results {
			switch {
			case err == nil:
				winners++
			case errors.Is(err, ErrBadVersion):
			default:
				t.Fatalf("round %d racer %d: %v", round, i, err)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners for version %d, want exactly 1", round, winners, kv.Version)
		}
	}
}

func testSessions(t *testing.T, h harness) {
	ctx, s := testCtx(t), client(t, h)
	key := "/sessions/" + t.Name()
	sess, err := s.NewSession(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	v, err := sess.CreateEphemeral(ctx, key+"/a", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.CreateEphemeral(ctx, key+"/a", []byte("b")); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := sess.PutEphemeral(ctx, key+"/a", []byte("a2"), v); err != nil {
		t.Fatal(err)
	}
	// Keep-alives hold the session past its TTL.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-sess.Done():
			t.Fatalf("session lost while kept alive: %v", sess.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := s.Get(ctx, key+"/a"); err != nil {
		t.Fatalf("ephemeral key gone while session alive: %v", err)
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	<-sess.Done()
	if !errors.Is(sess.Err(), ErrClosed) {
		t.Fatalf("closed session err = %v", sess.Err())
	}
	if _, err := s.Get(ctx, key+"/a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ephemeral key after close: %v", err)
	}

	// Expiry: the owner is told, the key vanishes.
	sess2, err := s.NewSession(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess2.CreateEphemeral(ctx, key+"/b", []byte("b")); err != nil {
		t.Fatal(err)
	}
	h.expire(t, sess2)
	select {
	case <-sess2.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("owner not told of its expired session")
	}
	if !errors.Is(sess2.Err(), ErrSessionExpired) {
		t.Fatalf("expired session err = %v", sess2.Err())
	}
	if _, err := s.Get(ctx, key+"/b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ephemeral key after expiry: %v", err)
	}
	if _, err := sess2.CreateEphemeral(ctx, key+"/c", nil); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("create on expired session: %v", err)
	}
}

// testEphemeralOwnerKilled: the key disappears within TTL + 1 s of its
// owner's death.
func testEphemeralOwnerKilled(t *testing.T, h harness) {
	ctx, s := testCtx(t), client(t, h)
	key := "/owner/" + t.Name()
	const ttl = 2 * time.Second
	h.killOwner(t, key, ttl)
	killed := time.Now()
	kv, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("owner's key not there after it was killed: %v", err)
	}
	events := s.Watch(ctx, key, int64(kv.Version)+1)
	limit := time.NewTimer(ttl + time.Second)
	defer limit.Stop()
	for {
		select {
		case r := <-events:
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			for _, ev := range r.Events {
				if ev.Type == EventDelete && ev.Key == key {
					t.Logf("ephemeral key deleted %v after its owner was killed (ttl %v)", time.Since(killed), ttl)
					return
				}
			}
		case <-limit.C:
			t.Fatalf("ephemeral key still there %v after its owner was killed", ttl+time.Second)
		}
	}
}

func collect(t *testing.T, ch <-chan WatchResponse, n int, within time.Duration) []Event {
	t.Helper()
	var got []Event
	timer := time.NewTimer(within)
	defer timer.Stop()
	for len(got) < n {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %d of %d events", len(got), n)
			}
			if r.Err != nil {
				t.Fatalf("watch error after %d events: %v", len(got), r.Err)
			}
			got = append(got, r.Events...)
		case <-timer.C:
			t.Fatalf("watch delivered %d of %d events in %v", len(got), n, within)
		}
	}
	return got
}

func testWatch(t *testing.T, h harness) {
	ctx, s := testCtx(t), client(t, h)
	prefix := "/watch/" + t.Name() + "/"
	v0, err := s.Create(ctx, prefix+"before", []byte("0"))
	if err != nil {
		t.Fatal(err)
	}
	// From v0: the earlier create is replayed, then live events follow.
	ch := s.Watch(ctx, prefix, int64(v0))
	v1, _ := s.Create(ctx, prefix+"a", []byte("1"))
	v2, _ := s.Put(ctx, prefix+"a", []byte("2"), v1)
	if _, err := s.Create(ctx, "/watch/elsewhere", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, prefix+"a", v2); err != nil {
		t.Fatal(err)
	}
	got := collect(t, ch, 4, 10*time.Second)
	want := []string{"put " + prefix + "before 0", "put " + prefix + "a 1", "put " + prefix + "a 2", "delete " + prefix + "a "}
	for i, ev := range got {
		if s := fmt.Sprintf("%v %s %s", ev.Type, ev.Key, ev.Value); s != want[i] {
			t.Fatalf("event %d = %q, want %q", i, s, want[i])
		}
		if i > 0 && ev.Revision <= got[i-1].Revision {
			t.Fatalf("events out of order: %+v", got)
		}
	}
	if got[2].Revision != int64(v2) {
		t.Fatalf("put event revision %d, version %d", got[2].Revision, v2)
	}
}

func testWatchCompacted(t *testing.T, h harness) {
	ctx, s := testCtx(t), client(t, h)
	prefix := "/compact/" + t.Name() + "/"
	var last Version
	for i := 0; i < 5; i++ {
		v, err := s.Create(ctx, fmt.Sprintf("%s%d", prefix, i), nil)
		if err != nil {
			t.Fatal(err)
		}
		last = v
	}
	h.compact(t, int64(last))
	select {
	case r := <-s.Watch(ctx, prefix, 1):
		if !errors.Is(r.Err, ErrCompacted) {
			t.Fatalf("watch from compacted revision: %+v, want ErrCompacted", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no compaction signal")
	}
	// Re-list, then watch from the listing's revision: nothing is missed.
	res, err := s.List(ctx, prefix, ListOptions{})
	if err != nil || len(res.KVs) != 5 {
		t.Fatalf("re-list: %d keys, %v", len(res.KVs), err)
	}
	ch := s.Watch(ctx, prefix, res.Revision+1)
	if _, err := s.Create(ctx, prefix+"after", nil); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, ch, 1, 10*time.Second); got[0].Key != prefix+"after" {
		t.Fatalf("after re-list got %+v", got)
	}
}

// testWatchAcrossReconnect: a writer keeps writing while the connection
// breaks; the watch delivers every successful write exactly once, in order.
func testWatchAcrossReconnect(t *testing.T, h harness) {
	ctx := testCtx(t)
	writer, watcher := client(t, h), client(t, h)
	prefix := "/reconnect/" + t.Name() + "/"
	first, err := writer.Create(ctx, prefix+"start", nil)
	if err != nil {
		t.Fatal(err)
	}
	ch := watcher.Watch(ctx, prefix, int64(first))
	var written []int64
	write := func(n int) {
		for i := 0; i < n; i++ {
			for {
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				v, err := writer.Create(wctx, fmt.Sprintf("%sk%04d", prefix, len(written)), nil)
				cancel()
				if err == nil {
					written = append(written, int64(v))
					break
				}
				if errors.Is(err, ErrExists) { // an earlier try landed after all
					kv, gerr := writer.Get(ctx, fmt.Sprintf("%sk%04d", prefix, len(written)))
					if gerr == nil {
						written = append(written, int64(kv.Version))
						break
					}
				}
				if ctx.Err() != nil {
					t.Fatalf("writes never resumed: %v", err)
				}
			}
		}
	}
	write(30)
	h.disrupt(t)
	write(30)
	got := collect(t, ch, 1+len(written), 30*time.Second)
	if len(got) != 1+len(written) {
		t.Fatalf("got %d events, want %d", len(got), 1+len(written))
	}
	if got[0].Revision != int64(first) {
		t.Fatalf("first event %+v", got[0])
	}
	for i, rev := range written {
		if got[i+1].Revision != rev {
			t.Fatalf("event %d revision %d, want %d (events lost, repeated or out of order)", i+1, got[i+1].Revision, rev)
		}
	}
}

func testAllocateID(t *testing.T, h harness) {
	ctx := testCtx(t)
	seq := "ids-" + fmt.Sprint(time.Now().UnixNano())
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for c := 0; c < 4; c++ {
		s := client(t, h)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				id, err := s.AllocateID(ctx, seq)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[id] {
					t.Errorf("id %d allocated twice", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != 100 {
		t.Fatalf("%d ids", len(seen))
	}
	h.restart(t)
	s := client(t, h)
	id, err := s.AllocateID(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	if seen[id] || id <= 100 {
		t.Fatalf("after restart allocated %d, already used or not beyond 100", id)
	}
}
