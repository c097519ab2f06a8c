package kafka

import (
	"context"
	"sync"
	"time"
)

// topicIDCache maps topic IDs to names for the versions that address topics
// by ID (Produce v13+, Fetch v13+, DeleteTopics v6+, Metadata v10+). Metadata
// responses refresh it (clients learn IDs there); a miss reloads every topic
// from the Backend, at most once per minRefresh so a client sending unknown
// IDs cannot make each request list every topic.
type topicIDCache struct {
	backend Backend

	mu          sync.Mutex
	names       map[[16]byte]string
	lastRefresh time.Time
}

const topicIDMinRefresh = 100 * time.Millisecond

func (c *topicIDCache) remember(topics []TopicInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names == nil {
		c.names = make(map[[16]byte]string)
	}
	for _, t := range topics {
		if t.ID != ([16]byte{}) {
			c.names[t.ID] = t.Name
		}
	}
}

// name returns the topic called id, or false if the Backend knows none.
func (c *topicIDCache) name(ctx context.Context, id [16]byte) (string, bool) {
	if id == ([16]byte{}) {
		return "", false
	}
	c.mu.Lock()
	name, ok := c.names[id]
	stale := time.Since(c.lastRefresh) >= topicIDMinRefresh
	if !ok && stale {
		c.lastRefresh = time.Now()
	}
	c.mu.Unlock()
	if ok || !stale {
		return name, ok
	}
	topics, err := c.backend.Topics(ctx, nil, false)
	if err != nil {
		return "", false
	}
	fresh := make(map[[16]byte]string, len(topics))
	for _, t := range topics {
		fresh[t.ID] = t.Name
	}
	c.mu.Lock()
	// Replace rather than merge: IDs of deleted topics must not linger
	// and resolve to a recreated topic of the same name.
	c.names = fresh
	c.mu.Unlock()
	name, ok = fresh[id]
	return name, ok
}

// forget drops the IDs of a deleted topic.
func (c *topicIDCache) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, n := range c.names {
		if n == name {
			delete(c.names, id)
		}
	}
}
