package autorecovery

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"quire/internal/meta"
)

// mirror keeps a local copy of the keys under a prefix: it lists them, then
// watches from the listing's revision, and lists again whenever the watch
// breaks (compaction, closed stream). Consumers read snapshots and are told
// of changes through Changed.
type mirror struct {
	store   meta.Store
	prefix  string
	log     *slog.Logger
	backoff time.Duration

	mu     sync.Mutex
	kvs    map[string]meta.KV
	listed bool
	// changed has capacity 1: a pending signal covers any number of changes.
	changed chan struct{}
}

func newMirror(store meta.Store, prefix string, log *slog.Logger, backoff time.Duration) *mirror {
	return &mirror{store: store, prefix: prefix, log: log, backoff: backoff, kvs: map[string]meta.KV{}, changed: make(chan struct{}, 1)}
}

// Changed is signalled after the first listing and after every change.
func (m *mirror) Changed() <-chan struct{} { return m.changed }

// Snapshot returns a copy of the keys, and whether a listing completed yet.
func (m *mirror) Snapshot() (map[string]meta.KV, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.kvs), m.listed
}

func (m *mirror) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// run lists and watches until ctx ends.
func (m *mirror) run(ctx context.Context) {
	for ctx.Err() == nil {
		kvs, rev, err := meta.ListAll(ctx, m.store, m.prefix)
		if err != nil {
			m.log.Debug("mirror: list", "prefix", m.prefix, "err", err)
			pause(ctx, m.backoff) // retry pacing: the store is unreachable
			continue
		}
		m.mu.Lock()
		m.kvs = make(map[string]meta.KV, len(kvs))
		for _, kv := range kvs {
			m.kvs[kv.Key] = kv
		}
		m.listed = true
		m.mu.Unlock()
		m.signal()
		// listAll's pages each have their own revision; watching from the
		// first page's keeps every later change, and the version checks in
		// apply drop the ones the later pages already showed.
		for resp := range m.store.Watch(ctx, m.prefix, rev+1) {
			if resp.Err != nil {
				m.log.Debug("mirror: watch ended", "prefix", m.prefix, "err", resp.Err)
				break
			}
			m.apply(resp.Events)
			m.signal()
		}
	}
}

func (m *mirror) apply(events []meta.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ev := range events {
		cur, ok := m.kvs[ev.Key]
		if ok && int64(cur.Version) > ev.Revision {
			continue // the listing already showed a later write
		}
		switch ev.Type {
		case meta.EventPut:
			m.kvs[ev.Key] = meta.KV{Key: ev.Key, Value: ev.Value, Version: meta.Version(ev.Revision)}
		case meta.EventDelete:
			delete(m.kvs, ev.Key)
		}
	}
}

// pause waits d or until ctx ends. It paces retries; it never waits for a
// condition.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
