package kafka

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// topicLimits caches each topic's batch size limit for Produce: the
// topic's own max.message.bytes when set on the topic, else
// Backend.MaxMessageBytes (as in Kafka, where the topic config defaults to
// the broker's message.max.bytes). Entries live topicLimitTTL, so a change
// made through another broker shows within that; changes through this one
// (IncrementalAlterConfigs, CreateTopics, DeleteTopics) drop the entry at
// once.
type topicLimits struct {
	mu      sync.Mutex
	entries map[string]topicLimit
}

type topicLimit struct {
	maxBytes int32
	loaded   time.Time
}

const (
	topicLimitTTL        = 5 * time.Second
	topicLimitMaxEntries = 100_000 // past this the cache starts over
	maxMessageBytesName  = "max.message.bytes"
)

// maxMessageBytes returns topic's limit.
func (s *Server) maxMessageBytes(ctx context.Context, topic string) int32 {
	c := &s.topicLimits
	c.mu.Lock()
	e, ok := c.entries[topic]
	c.mu.Unlock()
	if ok && time.Since(e.loaded) < topicLimitTTL {
		return e.maxBytes
	}
	limit := s.backend.MaxMessageBytes()
	entries, err := s.backend.TopicConfigs(ctx, topic)
	if err != nil {
		// Unknown topic or a Backend failure: the Partition lookup
		// reports it; do not cache.
		return limit
	}
	for _, e := range entries {
		if e.Name != maxMessageBytesName || e.Default || e.Value == nil {
			continue
		}
		if n, err := strconv.ParseInt(*e.Value, 10, 32); err == nil && n > 0 {
			limit = int32(n)
		}
	}
	c.mu.Lock()
	if c.entries == nil || len(c.entries) >= topicLimitMaxEntries {
		c.entries = make(map[string]topicLimit)
	}
	c.entries[topic] = topicLimit{maxBytes: limit, loaded: time.Now()}
	c.mu.Unlock()
	return limit
}

// forget drops topic's cached limit after this broker changed its configs.
func (c *topicLimits) forget(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, topic)
}
