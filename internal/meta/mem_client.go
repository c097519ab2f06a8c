package meta

import (
	"context"
	"fmt"
	"sync"
	"time"

	"quire/internal/clock"
)

// MemClient is one process's connection to a MemServer. It implements Store.
// Beyond Store it can be disconnected (a partition: operations fail with
// ErrUnavailable, keep-alives stop, watches pause and later resume) and
// crashed (the process died: nothing more happens, its sessions expire by TTL).
type MemClient struct {
	server *MemServer

	mu           sync.Mutex
	closed       bool
	closedErr    error
	disconnected bool
	connected    chan struct{} // closed while connected; replaced on Disconnect
	sessions     map[*memSession]struct{}
	watchers     map[*memWatcher]struct{}
}

var _ Store = (*MemClient)(nil)

func (c *MemClient) check(ctx context.Context, op Op, key string) error {
	c.mu.Lock()
	closed, closedErr, disconnected := c.closed, c.closedErr, c.disconnected
	c.mu.Unlock()
	if closed {
		return fmt.Errorf("meta: %s %q: %w", op, key, closedErr)
	}
	if disconnected {
		return fmt.Errorf("meta: %s %q: %w: client partitioned", op, key, ErrUnavailable)
	}
	return c.server.before(ctx, op, key)
}

// Disconnect partitions this client from the store.
func (c *MemClient) Disconnect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.disconnected || c.closed {
		return
	}
	c.disconnected = true
	c.connected = make(chan struct{})
	c.server.mu.Lock()
	for w := range c.watchers {
		w.breakLocked()
	}
	c.server.mu.Unlock()
}

// Reconnect heals a Disconnect; paused watches resume where they stopped.
func (c *MemClient) Reconnect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.disconnected {
		return
	}
	c.disconnected = false
	close(c.connected)
}

// Crash models the process dying (SIGKILL): the client stops, its sessions
// are not revoked and expire by TTL on the server.
func (c *MemClient) Crash() { c.shutdown(ErrClosed, false) }

// Close closes every session (deleting their ephemeral keys) and the client.
func (c *MemClient) Close() error {
	c.shutdown(ErrClosed, true)
	return nil
}

func (c *MemClient) shutdown(err error, revoke bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed, c.closedErr = true, err
	sessions := make([]*memSession, 0, len(c.sessions))
	for s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.server.mu.Lock()
	for w := range c.watchers {
		w.breakLocked()
	}
	c.server.mu.Unlock()
	if c.disconnected {
		close(c.connected) // release waiting watches so they notice the close
	}
	c.mu.Unlock()
	for _, s := range sessions {
		if revoke {
			s.Close()
		} else {
			s.stopKeepAlive()
		}
	}
}

func (c *MemClient) Get(ctx context.Context, key string) (KV, error) {
	if err := c.check(ctx, OpGet, key); err != nil {
		return KV{}, err
	}
	return c.server.get(key)
}

func (c *MemClient) Create(ctx context.Context, key string, value []byte) (Version, error) {
	if err := c.check(ctx, OpCreate, key); err != nil {
		return 0, err
	}
	return c.server.create(key, value, 0)
}

func (c *MemClient) Put(ctx context.Context, key string, value []byte, expected Version) (Version, error) {
	if err := c.check(ctx, OpPut, key); err != nil {
		return 0, err
	}
	return c.server.put(key, value, expected, 0)
}

func (c *MemClient) Delete(ctx context.Context, key string, expected Version) error {
	if err := c.check(ctx, OpDelete, key); err != nil {
		return err
	}
	return c.server.delete(key, expected)
}

func (c *MemClient) List(ctx context.Context, prefix string, opts ListOptions) (ListResult, error) {
	if err := c.check(ctx, OpList, prefix); err != nil {
		return ListResult{}, err
	}
	return c.server.list(prefix, opts), nil
}

func (c *MemClient) AllocateID(ctx context.Context, sequence string) (int64, error) {
	if err := c.check(ctx, OpAllocateID, sequence); err != nil {
		return 0, err
	}
	return c.server.allocateID(sequence), nil
}

// Watch follows the same contract as Etcd.Watch: ordered events from
// fromRevision, resumed from the last delivered revision after a disconnect.
func (c *MemClient) Watch(ctx context.Context, prefix string, fromRevision int64) <-chan WatchResponse {
	out := make(chan WatchResponse, 16)
	go c.runWatch(ctx, prefix, fromRevision, out)
	return out
}

func (c *MemClient) runWatch(ctx context.Context, prefix string, next int64, out chan<- WatchResponse) {
	defer close(out)
	for {
		c.mu.Lock()
		connected, closed := c.connected, c.closed
		c.mu.Unlock()
		if closed {
			return
		}
		select {
		case <-connected:
		case <-ctx.Done():
			return
		}
		w, start, err := c.server.subscribe(prefix, next)
		if err != nil {
			select {
			case out <- WatchResponse{Err: err}:
			case <-ctx.Done():
			}
			return
		}
		next = start
		if !c.track(w) {
			c.server.unsubscribe(w)
			return
		}
		for {
			c.server.mu.Lock()
			events, broken := w.queue, w.broken
			w.queue = nil
			c.server.mu.Unlock()
			if len(events) > 0 {
				select {
				case out <- WatchResponse{Events: events}:
					next = events[len(events)-1].Revision + 1
				case <-ctx.Done():
					c.untrack(w)
					return
				}
				continue
			}
			if broken {
				break
			}
			select {
			case <-w.signal:
			case <-w.brokenCh:
			case <-ctx.Done():
				c.untrack(w)
				return
			}
		}
		c.untrack(w)
	}
}

func (c *MemClient) track(w *memWatcher) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.disconnected {
		return false
	}
	c.watchers[w] = struct{}{}
	return true
}

func (c *MemClient) untrack(w *memWatcher) {
	c.mu.Lock()
	delete(c.watchers, w)
	c.mu.Unlock()
	c.server.unsubscribe(w)
}

type memWatcher struct {
	prefix   string
	queue    []Event
	signal   chan struct{} // capacity 1: "the queue grew"
	brokenCh chan struct{} // closed when the stream breaks
	broken   bool
	server   *MemServer
}

func (w *memWatcher) pushLocked(ev Event) {
	w.queue = append(w.queue, ev)
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *memWatcher) breakLocked() {
	if !w.broken {
		w.broken = true
		close(w.brokenCh)
	}
	delete(w.server.watchers, w)
}

// subscribe registers a watcher from revision from (0: from now) and returns
// the effective start revision.
func (s *MemServer) subscribe(prefix string, from int64) (*memWatcher, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if from == 0 {
		from = s.revision + 1
	}
	if from <= s.compacted {
		return nil, 0, fmt.Errorf("meta: watch %q from %d (compacted at %d): %w", prefix, from, s.compacted, ErrCompacted)
	}
	w := &memWatcher{prefix: prefix, signal: make(chan struct{}, 1), brokenCh: make(chan struct{}), server: s}
	for _, ev := range s.history {
		if ev.Revision >= from && len(ev.Key) >= len(prefix) && ev.Key[:len(prefix)] == prefix {
			w.pushLocked(ev)
		}
	}
	s.watchers[w] = struct{}{}
	return w, from, nil
}

func (s *MemServer) unsubscribe(w *memWatcher) {
	s.mu.Lock()
	delete(s.watchers, w)
	s.mu.Unlock()
}

func (c *MemClient) NewSession(ctx context.Context, ttl time.Duration) (Session, error) {
	if err := c.check(ctx, OpSession, ""); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("meta: session ttl %v must be positive", ttl)
	}
	s := &memSession{client: c, ttl: ttl, done: make(chan struct{})}
	s.id = c.server.grant(ttl, s.finish)
	c.mu.Lock()
	c.sessions[s] = struct{}{}
	c.mu.Unlock()
	s.scheduleKeepAlive()
	return s, nil
}

type memSession struct {
	client *MemClient
	id     int64
	ttl    time.Duration

	mu      sync.Mutex
	stopped bool
	timer   clock.Timer
	err     error
	done    chan struct{}
}

func (s *memSession) ID() int64             { return s.id }
func (s *memSession) TTL() time.Duration    { return s.ttl }
func (s *memSession) Done() <-chan struct{} { return s.done }

func (s *memSession) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// scheduleKeepAlive beats every TTL/3, as etcd's client does; a partitioned
// client misses beats and its session expires on the server.
func (s *memSession) scheduleKeepAlive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.timer = s.client.server.clock.AfterFunc(s.ttl/3, func() {
		s.client.mu.Lock()
		closed, disconnected := s.client.closed, s.client.disconnected
		s.client.mu.Unlock()
		if closed {
			return
		}
		if !disconnected && !s.client.server.keepAlive(s.id) {
			return // expired; finish was called by the server
		}
		s.scheduleKeepAlive()
	})
}

func (s *memSession) stopKeepAlive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
}

func (s *memSession) finish(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
	close(s.done)
	s.mu.Unlock()
	s.client.mu.Lock()
	delete(s.client.sessions, s)
	s.client.mu.Unlock()
}

func (s *memSession) CreateEphemeral(ctx context.Context, key string, value []byte) (Version, error) {
	if err := s.client.check(ctx, OpCreate, key); err != nil {
		return 0, err
	}
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("meta: create ephemeral %q: %w", key, err)
	}
	return s.client.server.create(key, value, s.id)
}

func (s *memSession) PutEphemeral(ctx context.Context, key string, value []byte, expected Version) (Version, error) {
	if err := s.client.check(ctx, OpPut, key); err != nil {
		return 0, err
	}
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("meta: put ephemeral %q: %w", key, err)
	}
	return s.client.server.put(key, value, expected, s.id)
}

func (s *memSession) Close() error {
	if s.Err() != nil {
		return nil
	}
	s.stopKeepAlive()
	s.client.server.revoke(s.id)
	s.finish(ErrClosed)
	return nil
}
