package meta

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"quire/internal/clock"
)

// Op names an operation for fault and latency injection.
type Op string

const (
	OpGet        Op = "get"
	OpCreate     Op = "create"
	OpPut        Op = "put"
	OpDelete     Op = "delete"
	OpList       Op = "list"
	OpSession    Op = "session"
	OpAllocateID Op = "allocate-id"
)

// MemConfig configures a MemServer.
type MemConfig struct {
	// Clock drives session expiry and injected latency; nil means the wall clock.
	Clock clock.Clock
	// HistoryLimit bounds the events kept for watches to resume from; older
	// ones are compacted. 0 means 100,000.
	HistoryLimit int
}

// MemServer is an in-memory, deterministic metadata store: the shared state
// that several MemClients (one per simulated process) talk to. It models what
// Quire relies on from etcd: one global revision, compare-and-swap on
// versions, leases with TTL, ordered watches with compaction.
type MemServer struct {
	clock        clock.Clock
	historyLimit int

	mu        sync.Mutex
	revision  int64
	data      map[string]memKey
	history   []Event // revision order; history[0].Revision > compacted
	compacted int64   // highest revision no longer in history
	leaseSeq  int64
	leases    map[int64]*memLease
	watchers  map[*memWatcher]struct{}

	// fault, when set, may fail any operation (checked before it applies).
	fault func(op Op, key string) error
	// latency, when set, delays every operation by the returned duration.
	latency func(op Op, key string) time.Duration
}

type memKey struct {
	value   []byte
	version int64
	lease   int64
}

type memLease struct {
	id       int64
	ttl      time.Duration
	deadline time.Time
	keys     map[string]struct{}
	timer    clock.Timer
	expired  func(err error) // tells the owning session
}

// NewMemServer returns an empty in-memory store.
func NewMemServer(cfg MemConfig) *MemServer {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.HistoryLimit == 0 {
		cfg.HistoryLimit = 100_000
	}
	return &MemServer{
		clock:        cfg.Clock,
		historyLimit: cfg.HistoryLimit,
		data:         map[string]memKey{},
		leases:       map[int64]*memLease{},
		watchers:     map[*memWatcher]struct{}{},
	}
}

// SetFault installs a hook that may fail operations (nil removes it). Return
// ErrUnavailable to model an outage.
func (s *MemServer) SetFault(f func(op Op, key string) error) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

// SetLatency installs a hook that delays operations (nil removes it).
func (s *MemServer) SetLatency(f func(op Op, key string) time.Duration) {
	s.mu.Lock()
	s.latency = f
	s.mu.Unlock()
}

// Revision is the store's current revision.
func (s *MemServer) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revision
}

// Compact drops history up to and including rev; watches from there get ErrCompacted.
func (s *MemServer) Compact(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactLocked(rev)
}

func (s *MemServer) compactLocked(rev int64) {
	if rev <= s.compacted {
		return
	}
	i := sort.Search(len(s.history), func(i int) bool { return s.history[i].Revision > rev })
	s.history = append([]Event(nil), s.history[i:]...)
	s.compacted = rev
}

// ExpireSession expires a session now, as if its owner stopped keeping it
// alive TTL ago. Its ephemeral keys are deleted and its owner is told.
func (s *MemServer) ExpireSession(id int64) {
	s.mu.Lock()
	l := s.leases[id]
	var notify func(error)
	if l != nil {
		notify = s.revokeLocked(l)
	}
	s.mu.Unlock()
	if notify != nil {
		notify(ErrSessionExpired)
	}
}

// Sessions lists the ids of live sessions, sorted.
func (s *MemServer) Sessions() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int64, 0, len(s.leases))
	for id := range s.leases {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// DisconnectWatches breaks every watch stream, as a network blip or server
// restart would; clients resume their watches from the last revision they saw.
func (s *MemServer) DisconnectWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		w.breakLocked()
	}
}

// NewClient returns a client: one simulated process's connection.
func (s *MemServer) NewClient() *MemClient {
	connected := make(chan struct{})
	close(connected)
	return &MemClient{server: s, sessions: map[*memSession]struct{}{}, watchers: map[*memWatcher]struct{}{}, connected: connected}
}

// before runs the latency and fault hooks for an operation.
func (s *MemServer) before(ctx context.Context, op Op, key string) error {
	s.mu.Lock()
	latency, fault := s.latency, s.fault
	s.mu.Unlock()
	if latency != nil {
		if d := latency(op, key); d > 0 {
			done := make(chan struct{})
			t := s.clock.AfterFunc(d, func() { close(done) })
			select {
			case <-done:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("meta: %s %q: %w: %v", op, key, ErrUnavailable, ctx.Err())
			}
		}
	}
	if fault != nil {
		if err := fault(op, key); err != nil {
			return fmt.Errorf("meta: %s %q: %w", op, key, err)
		}
	}
	return ctx.Err()
}

// commitLocked records a change at a new revision and feeds the watchers.
func (s *MemServer) commitLocked(typ EventType, key string, value []byte, lease int64) int64 {
	s.revision++
	ev := Event{Type: typ, Key: key, Revision: s.revision}
	if typ == EventPut {
		ev.Value = append([]byte(nil), value...)
		if old, ok := s.data[key]; ok && old.lease != 0 && old.lease != lease {
			if l := s.leases[old.lease]; l != nil {
				delete(l.keys, key)
			}
		}
		s.data[key] = memKey{value: ev.Value, version: s.revision, lease: lease}
		if l := s.leases[lease]; l != nil {
			l.keys[key] = struct{}{}
		}
	} else {
		if old, ok := s.data[key]; ok && old.lease != 0 {
			if l := s.leases[old.lease]; l != nil {
				delete(l.keys, key)
			}
		}
		delete(s.data, key)
	}
	s.history = append(s.history, ev)
	if over := len(s.history) - s.historyLimit; over > 0 {
		s.compactLocked(s.history[over-1].Revision)
	}
	for w := range s.watchers {
		if strings.HasPrefix(key, w.prefix) {
			w.pushLocked(ev)
		}
	}
	return s.revision
}

func (s *MemServer) get(key string) (KV, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.data[key]
	if !ok {
		return KV{}, fmt.Errorf("meta: get %q: %w", key, ErrNotFound)
	}
	return KV{Key: key, Value: append([]byte(nil), k.value...), Version: Version(k.version)}, nil
}

func (s *MemServer) create(key string, value []byte, lease int64) (Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lease != 0 && s.leases[lease] == nil {
		return 0, fmt.Errorf("meta: create %q: %w", key, ErrSessionExpired)
	}
	if _, ok := s.data[key]; ok {
		return 0, fmt.Errorf("meta: create %q: %w", key, ErrExists)
	}
	return Version(s.commitLocked(EventPut, key, value, lease)), nil
}

func (s *MemServer) put(key string, value []byte, expected Version, lease int64) (Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lease != 0 && s.leases[lease] == nil {
		return 0, fmt.Errorf("meta: put %q: %w", key, ErrSessionExpired)
	}
	k, ok := s.data[key]
	if !ok {
		return 0, fmt.Errorf("meta: put %q: %w", key, ErrNotFound)
	}
	if Version(k.version) != expected {
		return 0, fmt.Errorf("meta: put %q at %d (is %d): %w", key, expected, k.version, ErrBadVersion)
	}
	return Version(s.commitLocked(EventPut, key, value, lease)), nil
}

func (s *MemServer) delete(key string, expected Version) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.data[key]
	if !ok {
		return fmt.Errorf("meta: delete %q: %w", key, ErrNotFound)
	}
	if Version(k.version) != expected {
		return fmt.Errorf("meta: delete %q at %d (is %d): %w", key, expected, k.version, ErrBadVersion)
	}
	s.commitLocked(EventDelete, key, nil, 0)
	return nil
}

func (s *MemServer) list(prefix string, opts ListOptions) ListResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := opts.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	var keys []string
	for k := range s.data {
		if strings.HasPrefix(k, prefix) && (opts.After == "" || k > opts.After) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := ListResult{Revision: s.revision}
	if len(keys) > limit {
		keys, out.More = keys[:limit], true
	}
	for _, k := range keys {
		v := s.data[k]
		out.KVs = append(out.KVs, KV{Key: k, Value: append([]byte(nil), v.value...), Version: Version(v.version)})
	}
	return out
}

func (s *MemServer) allocateID(sequence string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := SequencePrefix + sequence
	var n int64
	if k, ok := s.data[key]; ok {
		n, _ = strconv.ParseInt(string(k.value), 10, 64)
	}
	n++
	s.commitLocked(EventPut, key, []byte(strconv.FormatInt(n, 10)), 0)
	return n
}

// grant creates a lease and schedules its expiry check.
func (s *MemServer) grant(ttl time.Duration, expired func(error)) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaseSeq++
	l := &memLease{id: s.leaseSeq, ttl: ttl, deadline: s.clock.Now().Add(ttl), keys: map[string]struct{}{}, expired: expired}
	s.leases[l.id] = l
	s.scheduleExpiryLocked(l)
	return l.id
}

func (s *MemServer) scheduleExpiryLocked(l *memLease) {
	d := l.deadline.Sub(s.clock.Now())
	l.timer = s.clock.AfterFunc(d, func() {
		s.mu.Lock()
		if s.leases[l.id] != l {
			s.mu.Unlock()
			return
		}
		if s.clock.Now().Before(l.deadline) {
			s.scheduleExpiryLocked(l) // kept alive meanwhile
			s.mu.Unlock()
			return
		}
		notify := s.revokeLocked(l)
		s.mu.Unlock()
		notify(ErrSessionExpired)
	})
}

// keepAlive extends a lease; false when it is gone.
func (s *MemServer) keepAlive(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[id]
	if l == nil {
		return false
	}
	l.deadline = s.clock.Now().Add(l.ttl)
	return true
}

// revokeLocked deletes a lease and its keys; it returns the owner's callback
// to run after the lock is released.
func (s *MemServer) revokeLocked(l *memLease) func(error) {
	delete(s.leases, l.id)
	if l.timer != nil {
		l.timer.Stop()
	}
	keys := make([]string, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.commitLocked(EventDelete, k, nil, 0)
	}
	return l.expired
}

func (s *MemServer) revoke(id int64) {
	s.mu.Lock()
	l := s.leases[id]
	if l != nil {
		s.revokeLocked(l)
	}
	s.mu.Unlock()
}
