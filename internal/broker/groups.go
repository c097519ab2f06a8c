package broker

import (
	"quire/internal/kafka"
	"quire/internal/kafka/group"
)

// newGroups starts the group coordinator: this broker coordinates the
// groups whose key (groupKey) falls in a bundle it owns, so a group moves
// with its bundle on failover; committed offsets live in the metadata store.
func newGroups(b *Broker) (kafka.GroupCoordinator, func(), error) {
	c, err := group.New(group.Config{
		Store:  b.cfg.Store,
		Owns:   func(g string) bool { return b.cluster.Owns(b.groupKey(g)) },
		Logger: b.cfg.Logger,
	})
	if err != nil {
		return nil, nil, err
	}
	return c, c.Close, nil
}
