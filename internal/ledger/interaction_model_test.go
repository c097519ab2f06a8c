package ledger_test

import (
	"fmt"
	"sort"

	"quire/internal/ledger"
	"quire/internal/meta"
)

// The interaction tests run the real Writer, Recovery and Reader against the
// two models in this file: bookies that store what they are sent, and a
// versioned metadata map with compare-and-swap. Both are deliberately dumb —
// no journal, no latency, no goroutines — so that every outcome in a golden
// file comes from the protocol cores and the order the script delivers in.

// modelBookie is a bookie as the ledger protocol sees it: entries per ledger,
// the highest LAC an add or an explicit LAC update carried, and the fence bit.
type modelBookie struct {
	id   ledger.BookieID
	zone string
	// down: the process is gone; requests reaching it fail at once (a refused
	// connection). Its storage survives (the journal was fsynced), as after a
	// crash and a restart.
	down bool
	// readOnly: out of space. Reads and fencing are served; an add is
	// refused unless it is a recovery add of an entry the bookie already
	// holds, which it acknowledges without writing (as the real bookie
	// does for entries it holds durably).
	readOnly bool
	ledgers  map[int64]*bookieLedger
}

type bookieLedger struct {
	entries map[int64][]byte // framed, exactly as the writer sent them
	lac     int64
	fenced  bool
}

// entryIfKnown returns the entry when the ledger is known and holds it.
func (l *bookieLedger) entryIfKnown(known bool, entry int64) ([]byte, bool) {
	if !known {
		return nil, false
	}
	data, ok := l.entries[entry]
	return data, ok
}

func newModelBookie(id ledger.BookieID, zone string) *modelBookie {
	return &modelBookie{id: id, zone: zone, ledgers: map[int64]*bookieLedger{}}
}

func (b *modelBookie) ledger(id int64) *bookieLedger {
	l := b.ledgers[id]
	if l == nil {
		l = &bookieLedger{entries: map[int64][]byte{}, lac: -1}
		b.ledgers[id] = l
	}
	return l
}

// handle applies req and returns the bookie's answer. The rules are the ones
// fencing relies on: a fenced ledger refuses adds except recovery adds, and a
// read with the fence flag fences the ledger before answering (durably, here
// trivially).
func (b *modelBookie) handle(req ledger.Request) ledger.Response {
	resp := ledger.Response{ID: req.ID, From: b.id, LastAddConfirmed: -1}
	if b.down {
		resp.Status = ledger.StatusFailed
		return resp
	}
	switch req.Kind {
	case ledger.RequestAdd:
		if b.readOnly {
			l, known := b.ledgers[req.LedgerID]
			if _, held := l.entryIfKnown(known, req.EntryID); !req.Recovery || !held {
				resp.Status = ledger.StatusFailed
				return resp
			}
		}
		l := b.ledger(req.LedgerID)
		if l.fenced && !req.Recovery {
			resp.Status = ledger.StatusFenced
			return resp
		}
		l.entries[req.EntryID] = append([]byte(nil), req.Payload...)
		if req.LastAddConfirmed > l.lac {
			l.lac = req.LastAddConfirmed
		}
		resp.Status = ledger.StatusOK
	case ledger.RequestRead:
		_, known := b.ledgers[req.LedgerID]
		if req.Fence {
			b.ledger(req.LedgerID).fenced = true
		}
		if !known {
			resp.Status = ledger.StatusNoSuchLedger
			return resp
		}
		l := b.ledgers[req.LedgerID]
		resp.LastAddConfirmed = l.lac
		if req.EntryID == -1 {
			resp.Status = ledger.StatusOK
			return resp
		}
		data, ok := l.entries[req.EntryID]
		if !ok {
			resp.Status = ledger.StatusNoSuchEntry
			return resp
		}
		resp.Status, resp.Payload = ledger.StatusOK, append([]byte(nil), data...)
	case ledger.RequestReadRange:
		// As a bookie's ReadRange: the entries it holds from EntryID on,
		// consecutive, at most MaxEntries and MaxBytes (at least one).
		l, known := b.ledgers[req.LedgerID]
		if !known {
			resp.Status = ledger.StatusNoSuchLedger
			return resp
		}
		resp.LastAddConfirmed = l.lac
		size := 0
		for id := req.EntryID; len(resp.Entries) < max(req.MaxEntries, 1); id++ {
			data, ok := l.entries[id]
			if !ok || len(resp.Entries) > 0 && req.MaxBytes > 0 && size+len(data) > req.MaxBytes {
				break
			}
			size += len(data)
			resp.Entries = append(resp.Entries, append([]byte(nil), data...))
		}
		resp.Status = ledger.StatusOK
		if len(resp.Entries) == 0 {
			resp.Status = ledger.StatusNoSuchEntry
		}
	case ledger.RequestWriteLac:
		// As a bookie: raise the LAC, never lower it; refuse on a fenced
		// ledger or one it holds nothing of.
		l, known := b.ledgers[req.LedgerID]
		switch {
		case !known:
			resp.Status = ledger.StatusNoSuchLedger
		case l.fenced:
			resp.Status = ledger.StatusFenced
		default:
			l.lac = max(l.lac, req.LastAddConfirmed)
			resp.Status, resp.LastAddConfirmed = ledger.StatusOK, l.lac
		}
	default:
		panic(fmt.Sprintf("model bookie %s: unknown request kind %d", b.id, req.Kind))
	}
	return resp
}

// entryIDs lists the entries the bookie stores for ledger id, in order.
func (b *modelBookie) entryIDs(id int64) []int64 {
	l := b.ledgers[id]
	if l == nil {
		return nil
	}
	out := make([]int64, 0, len(l.entries))
	for e := range l.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// modelMeta is the metadata store: one record per ledger, versioned by a
// store-wide revision (as etcd's mod revision), written only by CAS. Every
// record goes through Marshal/UnmarshalMetadata so that a core proposing an
// invalid record fails the test at the write, not later.
type modelMeta struct {
	revision meta.Version
	records  map[int64]storedRecord
}

type storedRecord struct {
	md      ledger.Metadata
	version meta.Version
}

func newModelMeta() *modelMeta { return &modelMeta{records: map[int64]storedRecord{}} }

func (s *modelMeta) create(md ledger.Metadata) (meta.Version, error) {
	if _, ok := s.records[md.ID]; ok {
		return 0, fmt.Errorf("create ledger %d: %w", md.ID, meta.ErrExists)
	}
	decoded, err := ledger.UnmarshalMetadata(md.Marshal())
	if err != nil {
		return 0, err
	}
	s.revision++
	s.records[md.ID] = storedRecord{md: decoded, version: s.revision}
	return s.revision, nil
}

func (s *modelMeta) get(id int64) (ledger.Metadata, meta.Version, bool) {
	r, ok := s.records[id]
	if !ok {
		return ledger.Metadata{}, 0, false
	}
	return r.md.Clone(), r.version, true
}

// apply performs op. A write whose record fails validation, or that rewrites
// a CLOSED record, is a bug in the core that proposed it, reported through
// the second result.
func (s *modelMeta) apply(op ledger.MetaOp) (ledger.MetaResult, error) {
	res := ledger.MetaResult{ID: op.ID}
	cur, ok := s.records[op.LedgerID]
	switch op.Kind {
	case ledger.MetaRead:
		if !ok {
			res.Err = fmt.Errorf("read ledger %d: %w", op.LedgerID, meta.ErrNotFound)
			return res, nil
		}
		res.Metadata, res.Version = cur.md.Clone(), cur.version
	case ledger.MetaWrite:
		if !ok {
			res.Err = fmt.Errorf("cas ledger %d: %w", op.LedgerID, meta.ErrNotFound)
			return res, nil
		}
		if cur.version != op.Expected {
			res.Err = fmt.Errorf("cas ledger %d at v=%d: %w", op.LedgerID, op.Expected, meta.ErrBadVersion)
			return res, nil
		}
		decoded, err := ledger.UnmarshalMetadata(op.Metadata.Marshal())
		if err != nil {
			return res, fmt.Errorf("invalid metadata proposed: %w", err)
		}
		s.revision++
		s.records[op.LedgerID] = storedRecord{md: decoded, version: s.revision}
		res.Metadata, res.Version = decoded.Clone(), s.revision
		// The store accepts it, as etcd would, but a CLOSED ledger is
		// immutable: whoever wrote this broke the protocol.
		if cur.md.State == ledger.StateClosed {
			return res, fmt.Errorf("CAS rewrote CLOSED ledger %d (v=%d) as %s", op.LedgerID, cur.version, decoded.State)
		}
	default:
		return res, fmt.Errorf("unknown metadata op kind %d", op.Kind)
	}
	return res, nil
}
