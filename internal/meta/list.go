package meta

import (
	"context"
	"encoding/json"
	"fmt"
)

// ListAll lists every key under prefix, page by page. The revision is the
// first page's: watching from it + 1 replays every change made during and
// after the listing, so a mirror that applies those events in order ends up
// exact even though later pages were read at later revisions.
func ListAll(ctx context.Context, store Store, prefix string) ([]KV, int64, error) {
	var out []KV
	var rev int64
	after := ""
	for {
		res, err := store.List(ctx, prefix, ListOptions{After: after})
		if err != nil {
			return nil, 0, fmt.Errorf("list %s: %w", prefix, err)
		}
		if rev == 0 {
			rev = res.Revision
		}
		out = append(out, res.KVs...)
		if !res.More || len(res.KVs) == 0 {
			return out, rev, nil
		}
		after = res.KVs[len(res.KVs)-1].Key
	}
}

// GetJSON reads key into v and returns its version.
func GetJSON(ctx context.Context, store Store, key string, v any) (Version, error) {
	kv, err := store.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(kv.Value, v); err != nil {
		return 0, fmt.Errorf("decode %s: %w", key, err)
	}
	return kv.Version, nil
}
