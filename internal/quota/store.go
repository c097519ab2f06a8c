package quota

// The quota configs in the metadata store: one key per entity under
// KeyPrefix (the key made from the entity's parts, so two brokers altering
// the same entity meet on one key and CAS orders them), the value the
// entity and its quotas as JSON (decoded and validated again on read: the
// store is not trusted to hold what this code wrote). An entity whose last
// quota is removed has its key deleted.
//
// Every broker keeps a copy, as the ACLs (internal/auth's acl_store.go): a
// listing, then a watch from the listing's revision; a broken or compacted
// watch lists again. Requests read the copy's immutable Snapshot through an
// atomic pointer. Alter returns once this process's copy has the change,
// so a client that sets a quota and describes it on the same broker sees
// it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"quire/internal/meta"
)

// KeyPrefix is where quota configs live in the metadata store.
const KeyPrefix = "/quire/quotas/"

// storedEntity is an entity's value in the store. A nil name is the
// default.
type storedEntity struct {
	Entity map[string]*string `json:"entity"`
	Quotas map[string]float64 `json:"quotas"`
}

// Key is the store key of a (valid) entity.
func Key(e Entity) string {
	var parts []string
	for _, t := range e.Types() {
		p := e.Get(t)
		name := "<default>" // never an escaped name: PathEscape escapes < and >
		if p.Kind == Named {
			name = url.PathEscape(p.Name)
		}
		parts = append(parts, t+"="+name)
	}
	return KeyPrefix + strings.Join(parts, "/")
}

func encode(e Entity, v Values) []byte {
	s := storedEntity{Entity: make(map[string]*string), Quotas: v}
	for _, t := range e.Types() {
		s.Entity[t] = e.Get(t).NamePtr()
	}
	value, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("encode quota %v: %v", e, err)) // strings and finite floats always encode
	}
	return value
}

// decode reads a stored value; what it returns is valid.
func decode(value []byte) (Entity, Values, error) {
	var s storedEntity
	if err := json.Unmarshal(value, &s); err != nil {
		return Entity{}, nil, fmt.Errorf("decode quota: %w", err)
	}
	var e Entity
	for t, name := range s.Entity {
		p := DefaultPart
		if name != nil {
			p = Name(*name)
		}
		if !e.Set(t, p) {
			return Entity{}, nil, invalidf("Unhandled client quota entity type: %s", t)
		}
	}
	for k, x := range s.Quotas {
		if err := e.ValidateValue(k, x); err != nil {
			return Entity{}, nil, err
		}
	}
	return e, Values(s.Quotas), nil
}

// Store is the quota configs in the metadata store and this process's copy.
type Store struct {
	store meta.Store
	log   *slog.Logger
	snap  atomic.Pointer[Snapshot]

	mu sync.Mutex
	// quotas is the copy by key. Invariant: the store's content under
	// KeyPrefix at revision rev (undecodable values left out).
	quotas map[string]cached
	rev    int64
	// changed is closed (and replaced) whenever the copy changes.
	changed chan struct{}
	// onChange is called (outside the lock) after each change.
	onChange []func(*Snapshot)

	cancel context.CancelFunc
	done   chan struct{}
}

type cached struct {
	entity  Entity
	values  Values
	version meta.Version
}

// Open lists the quotas in store (failing if it cannot: a broker must not
// serve without the quotas it was told to enforce) and follows their
// changes until Close. log may be nil.
func Open(ctx context.Context, store meta.Store, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Store{store: store, log: log, changed: make(chan struct{}), done: make(chan struct{})}
	rev, err := s.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("load client quotas: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		meta.Follow(runCtx, s.store, KeyPrefix, rev, "client quotas", s.log, s.load, s.apply)
	}()
	return s, nil
}

// Static is a Store that never touches a metadata store: its quotas are
// fixed (tests, and a front end without a store). Alter fails.
func Static(quotas map[Entity]Values) *Store {
	s := &Store{changed: make(chan struct{}), done: make(chan struct{})}
	close(s.done)
	s.snap.Store(NewSnapshot(quotas))
	return s
}

// Close stops following the store.
func (s *Store) Close() {
	if s.cancel != nil {
		s.cancel()
	}
	<-s.done
}

// Snapshot is the copy now; never nil.
func (s *Store) Snapshot() *Snapshot {
	if snap := s.snap.Load(); snap != nil {
		return snap
	}
	return NewSnapshot(nil)
}

// OnChange registers f to be called with every new snapshot.
func (s *Store) OnChange(f func(*Snapshot)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = append(s.onChange, f)
}

func (s *Store) load(ctx context.Context) (int64, error) {
	kvs, rev, err := meta.ListAll(ctx, s.store, KeyPrefix)
	if err != nil {
		return 0, err
	}
	quotas := make(map[string]cached, len(kvs))
	for _, kv := range kvs {
		if c, ok := s.decode(kv.Key, kv.Value); ok {
			c.version = kv.Version
			quotas[kv.Key] = c
		}
	}
	s.mu.Lock()
	s.quotas = quotas
	s.rev = max(s.rev, rev)
	snap, hooks := s.publishLocked()
	s.mu.Unlock()
	for _, f := range hooks {
		f(snap)
	}
	return rev, nil
}

func (s *Store) decode(key string, value []byte) (cached, bool) {
	e, v, err := decode(value)
	if err == nil && Key(e) != key {
		err = fmt.Errorf("entity %v stored under %s", e, key)
	}
	if err != nil {
		s.log.Warn("ignoring an undecodable client quota in the metadata store", "key", key, "err", err)
		return cached{}, false
	}
	return cached{entity: e, values: v}, true
}

func (s *Store) apply(events []meta.Event) {
	s.mu.Lock()
	for _, ev := range events {
		delete(s.quotas, ev.Key)
		if ev.Type == meta.EventPut {
			if c, ok := s.decode(ev.Key, ev.Value); ok {
				c.version = meta.Version(ev.Revision)
				s.quotas[ev.Key] = c
			}
		}
		s.rev = max(s.rev, ev.Revision)
	}
	snap, hooks := s.publishLocked()
	s.mu.Unlock()
	for _, f := range hooks {
		f(snap)
	}
}

func (s *Store) publishLocked() (*Snapshot, []func(*Snapshot)) {
	m := make(map[Entity]Values, len(s.quotas))
	for _, c := range s.quotas {
		m[c.entity] = c.values
	}
	snap := NewSnapshot(m)
	s.snap.Store(snap)
	close(s.changed)
	s.changed = make(chan struct{})
	return snap, slices.Clone(s.onChange)
}

func (s *Store) waitCopy(ctx context.Context, rev int64) error {
	for {
		s.mu.Lock()
		ok, changed := s.rev >= rev, s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("wait for this broker's copy of the client quotas: %w", ctx.Err())
		}
	}
}

// ErrStatic is Alter's error on a Static store.
var ErrStatic = errors.New("client quotas are fixed on this broker")

// Alter applies ops to e's quotas (validated first: ErrInvalid) by CAS on
// e's key, retrying on a concurrent change; with validateOnly it only
// validates. It returns once this process's copy has the change.
func (s *Store) Alter(ctx context.Context, e Entity, ops []Op, validateOnly bool) error {
	if e.IP.Kind == Named {
		e.IP.Name = CanonicalIP(e.IP.Name)
	}
	if err := ValidateOps(e, ops); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	if s.store == nil {
		return ErrStatic
	}
	key := Key(e)
	for {
		kv, err := s.store.Get(ctx, key)
		exists := err == nil
		if err != nil && !errors.Is(err, meta.ErrNotFound) {
			return fmt.Errorf("read client quota %v: %w", e, err)
		}
		var current Values
		if exists {
			_, current, err = decode(kv.Value)
			if err != nil {
				s.log.Warn("replacing an undecodable client quota", "key", key, "err", err)
				current = nil
			}
		}
		next := current.Apply(ops)
		var version meta.Version
		switch {
		case len(next) == 0 && !exists:
			return nil
		case len(next) == 0:
			err = s.store.Delete(ctx, key, kv.Version)
			if err == nil {
				// The delete's revision is not returned: wait for a copy at
				// least as new as the key's last write, then for the key's
				// absence.
				return s.waitGone(ctx, key)
			}
		case !exists:
			version, err = s.store.Create(ctx, key, encode(e, next))
		default:
			version, err = s.store.Put(ctx, key, encode(e, next), kv.Version)
		}
		if errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrExists) || errors.Is(err, meta.ErrNotFound) {
			continue // changed meanwhile: read it again
		}
		if err != nil {
			return fmt.Errorf("store client quota %v: %w", e, err)
		}
		return s.waitCopy(ctx, int64(version))
	}
}

func (s *Store) waitGone(ctx context.Context, key string) error {
	for {
		s.mu.Lock()
		_, present := s.quotas[key]
		changed := s.changed
		s.mu.Unlock()
		if !present {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("wait for this broker's copy of the client quotas: %w", ctx.Err())
		}
	}
}
