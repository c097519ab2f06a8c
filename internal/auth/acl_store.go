package auth

// The ACLs in the metadata store: one key per ACL under ACLKeyPrefix, the
// key made from every field of the ACL (so creating an ACL that exists is a
// no-op, as in Kafka, and two brokers creating the same one at once agree),
// the value the ACL as JSON (what a listing decodes; decodeACL is fuzzed, as
// anyone who can write to etcd can put bytes there).
//
// Every broker keeps a copy: a listing, then a watch from the listing's
// revision; a broken or compacted watch lists again. Decisions read the
// copy's immutable index (an atomic pointer), so authorizing a request
// never touches the store. A change made through this ACLStore returns
// only once this broker's copy has it, so a client that creates an ACL and
// then uses it on the same broker is not refused; other brokers see it
// when their watch delivers it (milliseconds).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"

	"quire/internal/meta"
)

// ACLKeyPrefix is where the ACLs live in the metadata store.
const ACLKeyPrefix = "/quire/auth/acls/"

// storedACL is an ACL's value in the store.
type storedACL struct {
	ResourceType int8   `json:"resource_type"`
	PatternType  int8   `json:"pattern_type"`
	ResourceName string `json:"resource_name"`
	Principal    string `json:"principal"`
	Host         string `json:"host"`
	Operation    int8   `json:"operation"`
	Permission   int8   `json:"permission"`
}

// aclKey is the store key of a (valid) ACL.
func aclKey(a ACL) string {
	return fmt.Sprintf("%s%d/%d/%s/%s/%s/%d/%d", ACLKeyPrefix, a.ResourceType, a.PatternType,
		url.PathEscape(a.ResourceName), url.PathEscape(a.Principal.String()), url.PathEscape(a.Host), a.Operation, a.Permission)
}

func encodeACL(a ACL) []byte {
	value, err := json.Marshal(storedACL{
		ResourceType: int8(a.ResourceType), PatternType: int8(a.PatternType), ResourceName: a.ResourceName,
		Principal: a.Principal.String(), Host: a.Host, Operation: int8(a.Operation), Permission: int8(a.Permission),
	})
	if err != nil {
		panic(fmt.Sprintf("encode ACL %v: %v", a, err)) // strings and integers always encode
	}
	return value
}

// decodeACL reads a stored value; what it returns is a valid ACL.
func decodeACL(value []byte) (ACL, error) {
	var s storedACL
	if err := json.Unmarshal(value, &s); err != nil {
		return ACL{}, fmt.Errorf("decode ACL: %w", err)
	}
	p, err := ParsePrincipal(s.Principal)
	if err != nil {
		return ACL{}, err
	}
	a := ACL{
		ResourceType: ResourceType(s.ResourceType), PatternType: PatternType(s.PatternType), ResourceName: s.ResourceName,
		Principal: p, Host: s.Host, Operation: Operation(s.Operation), Permission: Permission(s.Permission),
	}
	if err := a.Validate(); err != nil {
		return ACL{}, err
	}
	return a, nil
}

// cachedACL is one ACL of the copy with the version of its key.
type cachedACL struct {
	acl     ACL
	version meta.Version
}

// ACLStore is the ACLs in the metadata store and this process's copy.
type ACLStore struct {
	store meta.Store
	log   *slog.Logger
	index atomic.Pointer[aclIndex]

	mu sync.Mutex
	// acls is the copy, by key. Invariant: it is the store's content under
	// ACLKeyPrefix at revision rev (undecodable values left out).
	acls map[string]cachedACL
	rev  int64
	// changed is closed (and replaced) whenever the copy changes.
	changed chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// OpenACLStore lists the ACLs in store (failing if it cannot: a broker must
// not serve with an empty copy, which would refuse or, with
// allow.everyone.if.no.acl.found, allow everything) and follows their
// changes until Close. log may be nil (slog.Default()).
func OpenACLStore(ctx context.Context, store meta.Store, log *slog.Logger) (*ACLStore, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &ACLStore{store: store, log: log, changed: make(chan struct{}), done: make(chan struct{})}
	rev, err := s.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("load ACLs: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		meta.Follow(runCtx, s.store, ACLKeyPrefix, rev, "ACLs", s.log, s.load, s.apply)
	}()
	return s, nil
}

// Close stops following the store.
func (s *ACLStore) Close() {
	s.cancel()
	<-s.done
}

func (s *ACLStore) snapshot() *aclIndex { return s.index.Load() }

// load lists the prefix and replaces the copy; it returns the revision to
// watch after.
func (s *ACLStore) load(ctx context.Context) (int64, error) {
	kvs, rev, err := meta.ListAll(ctx, s.store, ACLKeyPrefix)
	if err != nil {
		return 0, err
	}
	acls := make(map[string]cachedACL, len(kvs))
	for _, kv := range kvs {
		if a, ok := s.decode(kv.Key, kv.Value); ok {
			acls[kv.Key] = cachedACL{acl: a, version: kv.Version}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acls = acls
	s.rev = max(s.rev, rev)
	s.publishLocked()
	return rev, nil
}

func (s *ACLStore) decode(key string, value []byte) (ACL, bool) {
	a, err := decodeACL(value)
	if err != nil {
		s.log.Warn("ignoring an undecodable ACL in the metadata store", "key", key, "err", err)
		return ACL{}, false
	}
	return a, true
}

// apply applies one batch of watch events.
func (s *ACLStore) apply(events []meta.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range events {
		delete(s.acls, ev.Key)
		if ev.Type == meta.EventPut {
			if a, ok := s.decode(ev.Key, ev.Value); ok {
				s.acls[ev.Key] = cachedACL{acl: a, version: meta.Version(ev.Revision)}
			}
		}
		s.rev = max(s.rev, ev.Revision)
	}
	s.publishLocked()
}

// publishLocked rebuilds the index from the copy and wakes the waiters.
func (s *ACLStore) publishLocked() {
	keys := make([]string, 0, len(s.acls))
	for k := range s.acls {
		keys = append(keys, k)
	}
	sort.Strings(keys) // a stable order for DescribeAcls
	acls := make([]ACL, 0, len(keys))
	for _, k := range keys {
		acls = append(acls, s.acls[k].acl)
	}
	s.index.Store(newACLIndex(acls))
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitCopy waits until cond holds of the copy (under the lock) or ctx ends.
func (s *ACLStore) waitCopy(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ok, changed := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("wait for this broker's copy of the ACLs: %w", ctx.Err())
		}
	}
}

// List returns the ACLs f selects, from the copy.
func (s *ACLStore) List(f ACLFilter) []ACL {
	var out []ACL
	for _, a := range s.snapshot().all {
		if f.Matches(a) {
			out = append(out, a)
		}
	}
	return out
}

// Create stores a (valid: ErrInvalidACL otherwise); an ACL that exists
// already is left as it is. It returns once this process's copy has it.
func (s *ACLStore) Create(ctx context.Context, a ACL) error {
	if err := a.Validate(); err != nil {
		return err
	}
	key := aclKey(a)
	version, err := s.store.Create(ctx, key, encodeACL(a))
	if errors.Is(err, meta.ErrExists) {
		kv, gerr := s.store.Get(ctx, key)
		if errors.Is(gerr, meta.ErrNotFound) {
			return nil // created and deleted by others meanwhile
		}
		if gerr != nil {
			return fmt.Errorf("read ACL %v: %w", a, gerr)
		}
		version, err = kv.Version, nil
	}
	if err != nil {
		return fmt.Errorf("store ACL %v: %w", a, err)
	}
	return s.waitCopy(ctx, func() bool { return s.rev >= int64(version) })
}

// Delete removes every ACL f selects (as the copy has them) and returns
// those it removed; an ACL removed meanwhile by someone else is not among
// them. It returns once this process's copy no longer has them.
func (s *ACLStore) Delete(ctx context.Context, f ACLFilter) ([]ACL, error) {
	s.mu.Lock()
	type victim struct {
		key string
		cachedACL
	}
	var victims []victim
	for k, c := range s.acls {
		if f.Matches(c.acl) {
			victims = append(victims, victim{k, c})
		}
	}
	s.mu.Unlock()
	sort.Slice(victims, func(i, j int) bool { return victims[i].key < victims[j].key })
	var deleted []ACL
	for _, v := range victims {
		err := s.store.Delete(ctx, v.key, v.version)
		if errors.Is(err, meta.ErrBadVersion) {
			// Deleted and created again since the copy saw it (the same
			// ACL, as the key is the ACL): delete what is there now.
			kv, gerr := s.store.Get(ctx, v.key)
			switch {
			case errors.Is(gerr, meta.ErrNotFound):
				continue
			case gerr != nil:
				return deleted, fmt.Errorf("read ACL %v: %w", v.acl, gerr)
			}
			v.version = kv.Version
			err = s.store.Delete(ctx, v.key, v.version)
		}
		if errors.Is(err, meta.ErrNotFound) || errors.Is(err, meta.ErrBadVersion) {
			continue // someone else deleted it (or raced us again)
		}
		if err != nil {
			return deleted, fmt.Errorf("delete ACL %v: %w", v.acl, err)
		}
		deleted = append(deleted, v.acl)
		key, version := v.key, v.version
		if err := s.waitCopy(ctx, func() bool { c, ok := s.acls[key]; return !ok || c.version > version }); err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}
