package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"quire/internal/ledger"
	"quire/internal/meta"
)

// metaConfig is the metadata store's behaviour for one run.
type metaConfig struct {
	// delayMin..delayMax: one way, actor to store and store to actor.
	delayMin, delayMax time.Duration
	// ambiguousProb: a write that succeeded reports ErrUnavailable anyway
	// (the response was lost: the caller cannot tell whether it applied).
	ambiguousProb float64
}

// metaService runs the cores' MetaOps against the in-memory metadata store
// (meta.MemServer), one MemClient per actor. An op is applied after a random
// delay and its result delivered after another, in order per actor. Store
// outages come from the server's own fault hook and actor partitions from
// MemClient.Disconnect, so the errors are the store's, wrapping
// meta.ErrUnavailable. It never loses an op: the cores have no timeout for
// metadata operations and rely on their shell to always complete them.
type metaService struct {
	s       *ledgerSim
	cfg     metaConfig
	server  *meta.MemServer
	clients map[string]*meta.MemClient
	tail    map[[2]string]time.Duration // FIFO per direction and actor
	outages []window
	bypass  bool // the checkers' own reads ignore outages

	// current is the record last written, for the checkers.
	current    ledger.Metadata
	hasCurrent bool
}

type window struct{ from, until time.Duration }

func newMetaService(s *ledgerSim, cfg metaConfig) *metaService {
	m := &metaService{s: s, cfg: cfg, server: meta.NewMemServer(meta.MemConfig{Clock: s.clock}),
		clients: map[string]*meta.MemClient{}, tail: map[[2]string]time.Duration{}}
	m.server.SetFault(func(meta.Op, string) error {
		if m.bypass {
			return nil
		}
		for _, w := range m.outages {
			if s.e.now >= w.from && s.e.now < w.until {
				return fmt.Errorf("sim outage: %w", meta.ErrUnavailable)
			}
		}
		return nil
	})
	return m
}

func (m *metaService) client(actor string) *meta.MemClient {
	c := m.clients[actor]
	if c == nil {
		c = m.server.NewClient()
		m.clients[actor] = c
	}
	return c
}

// partition cuts actor off the store for d.
func (m *metaService) partition(actor string, d time.Duration) {
	c := m.client(actor)
	c.Disconnect()
	m.s.e.tracef("meta", "PARTITION from %s for %v", actor, d)
	m.s.e.after(d, func() {
		c.Reconnect()
		m.s.e.tracef("meta", "partition from %s healed", actor)
	})
}

func (m *metaService) fifo(from, to string, d time.Duration) time.Duration {
	at := m.s.e.now + d
	link := [2]string{from, to}
	if t := m.tail[link]; at < t {
		at = t
	}
	m.tail[link] = at
	return at
}

// submit performs op for actor and later hands the result back to it.
func (m *metaService) submit(actor string, op ledger.MetaOp) {
	e := m.s.e
	e.tracef(actor, "-> meta %s", describeMetaOp(op))
	applyAt := m.fifo(actor, "meta", e.between(m.cfg.delayMin, m.cfg.delayMax))
	e.at(applyAt, func() {
		res := m.apply(actor, op)
		resultAt := m.fifo("meta", actor, e.between(m.cfg.delayMin, m.cfg.delayMax))
		e.at(resultAt, func() {
			if a := m.s.actors[actor]; a != nil {
				a.onMetaResult(res)
			}
		})
	})
}

func (m *metaService) apply(actor string, op ledger.MetaOp) ledger.MetaResult {
	ctx := context.Background()
	key := ledger.Key(op.LedgerID)
	c := m.client(actor)
	res := ledger.MetaResult{ID: op.ID}
	switch op.Kind {
	case ledger.MetaRead:
		kv, err := c.Get(ctx, key)
		if err != nil {
			res.Err = err
			break
		}
		md, err := ledger.UnmarshalMetadata(kv.Value)
		if err != nil {
			m.s.violate(kindBadMetadata, "stored metadata does not decode: %v", err)
			res.Err = err
			break
		}
		res.Metadata, res.Version = md, kv.Version
	case ledger.MetaWrite:
		v, err := c.Put(ctx, key, op.Metadata.Marshal(), op.Expected)
		if err != nil {
			if errors.Is(err, meta.ErrBadVersion) {
				m.s.stats.CASConflicts++
			}
			res.Err = err
			break
		}
		if actor == "writer" && op.Metadata.State == ledger.StateOpen {
			m.s.stats.EnsembleChanges++
		}
		res.Metadata, res.Version = op.Metadata.Clone(), v
		m.s.onMetadataWritten(actor, m.current, m.hasCurrent, res.Metadata)
		m.current, m.hasCurrent = res.Metadata.Clone(), true
		if e := m.s.e; e.chance(m.cfg.ambiguousProb) {
			m.s.stats.AmbiguousMeta++
			e.tracef("meta", "applied %s for %s at v%d, result LOST", describeMetaOp(op), actor, v)
			return ledger.MetaResult{ID: op.ID, Err: fmt.Errorf("sim: result of %s lost: %w", describeMetaOp(op), meta.ErrUnavailable)}
		}
	}
	m.s.e.tracef("meta", "%s for %s: %s", describeMetaOp(op), actor, describeMetaResult(res))
	return res
}

// create stores a new ledger's first record (the writer's Create).
func (m *metaService) create(actor string, md ledger.Metadata) (meta.Version, error) {
	v, err := m.client(actor).Create(context.Background(), ledger.Key(md.ID), md.Marshal())
	if err == nil {
		m.current, m.hasCurrent = md.Clone(), true
	}
	return v, err
}

// read returns the stored record directly (a reader opening the ledger).
func (m *metaService) read(actor string, ledgerID int64) (ledger.Metadata, error) {
	if actor == checkerName {
		m.bypass = true
		defer func() { m.bypass = false }()
	}
	kv, err := m.client(actor).Get(context.Background(), ledger.Key(ledgerID))
	if err != nil {
		return ledger.Metadata{}, err
	}
	return ledger.UnmarshalMetadata(kv.Value)
}

func describeMetaOp(op ledger.MetaOp) string {
	if op.Kind == ledger.MetaRead {
		return fmt.Sprintf("read#%d", op.ID)
	}
	return fmt.Sprintf("cas#%d@v%d %s", op.ID, op.Expected, describeMetadata(op.Metadata))
}

func describeMetaResult(r ledger.MetaResult) string {
	switch {
	case errors.Is(r.Err, meta.ErrBadVersion):
		return "BAD VERSION"
	case r.Err != nil:
		return "error: " + r.Err.Error()
	}
	return fmt.Sprintf("ok v%d %s", r.Version, describeMetadata(r.Metadata))
}

func describeMetadata(md ledger.Metadata) string {
	out := string(md.State)
	if md.State == ledger.StateClosed {
		out += fmt.Sprintf(" last=%d", md.LastEntryID)
	}
	for _, f := range md.Fragments {
		out += fmt.Sprintf(" [%d:%v]", f.FirstEntry, f.Ensemble)
	}
	return out
}
