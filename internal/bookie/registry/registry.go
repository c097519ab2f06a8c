// Package registry keeps the bookies' registrations in the metadata store:
// one ephemeral key per live bookie, holding its address, zone and whether it
// takes writes. Ledger writers read it to place ensembles; the auditor
// watches it to notice lost bookies.
//
// It owns the key layout under Prefix and nothing else; it never talks to a
// bookie.
package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"quire/internal/meta"
)

// Prefix is where registrations live: Key(bookie id).
const Prefix = "/quire/bookies/"

// Key is the registration key of a bookie.
func Key(id string) string { return Prefix + id }

// Info is one bookie's registration.
type Info struct {
	ID         string `json:"id"`
	Addr       string `json:"addr"`
	Zone       string `json:"zone,omitempty"`
	ReadOnly   bool   `json:"readOnly"`
	FreeBytes  uint64 `json:"freeBytes,omitempty"`
	TotalBytes uint64 `json:"totalBytes,omitempty"`
}

// Registration is a live bookie's ephemeral key.
type Registration struct {
	session meta.Session
	key     string

	mu      sync.Mutex
	info    Info
	version meta.Version
}

// Register creates the bookie's ephemeral key in session. It fails with
// meta.ErrExists when a bookie with the same id is already registered (a
// second process on the same identity must not start).
func Register(ctx context.Context, session meta.Session, info Info) (*Registration, error) {
	if info.ID == "" || strings.Contains(info.ID, "/") {
		return nil, fmt.Errorf("registry: bad bookie id %q", info.ID)
	}
	value, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	key := Key(info.ID)
	v, err := session.CreateEphemeral(ctx, key, value)
	if err != nil {
		return nil, fmt.Errorf("registry: register bookie %s: %w", info.ID, err)
	}
	return &Registration{session: session, key: key, info: info, version: v}, nil
}

// Info returns the registered state.
func (r *Registration) Info() Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info
}

// Update rewrites the registration (e.g. the bookie turned read-only).
func (r *Registration) Update(ctx context.Context, change func(*Info)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.info
	change(&next)
	value, err := json.Marshal(next)
	if err != nil {
		return err
	}
	v, err := r.session.PutEphemeral(ctx, r.key, value, r.version)
	if err != nil {
		return fmt.Errorf("registry: update bookie %s: %w", next.ID, err)
	}
	r.info, r.version = next, v
	return nil
}

// List returns every registered bookie, sorted by id.
func List(ctx context.Context, store meta.Store) ([]Info, error) {
	var out []Info
	after := ""
	for {
		res, err := store.List(ctx, Prefix, meta.ListOptions{After: after})
		if err != nil {
			return nil, fmt.Errorf("registry: list bookies: %w", err)
		}
		for _, kv := range res.KVs {
			var info Info
			if err := json.Unmarshal(kv.Value, &info); err != nil {
				return nil, fmt.Errorf("registry: bookie %s: %w", kv.Key, err)
			}
			out = append(out, info)
		}
		if !res.More {
			break
		}
		after = res.KVs[len(res.KVs)-1].Key
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Get returns one bookie's registration, or meta.ErrNotFound.
func Get(ctx context.Context, store meta.Store, id string) (Info, error) {
	kv, err := store.Get(ctx, Key(id))
	if err != nil {
		return Info{}, err
	}
	var info Info
	if err := json.Unmarshal(kv.Value, &info); err != nil {
		return Info{}, fmt.Errorf("registry: bookie %s: %w", id, err)
	}
	return info, nil
}
