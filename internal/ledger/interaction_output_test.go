package ledger_test

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/cockroachdb/datadriven"

	"quire/internal/ledger"
	"quire/internal/meta"
)

// What the interaction scripts print: the print-* commands, read-ledger and
// the one-line renderings of requests, answers and metadata records.

// ---- printing ----

func (e *env) printBookies() {
	for _, id := range e.bookieOrder {
		b := e.bookies[id]
		line := fmt.Sprintf("%s %s", id, b.zone)
		if b.down {
			line += " (down)"
		}
		l := b.ledgers[e.ledgerID]
		if l == nil {
			e.event("%s: -", line)
			continue
		}
		ids := b.entryIDs(e.ledgerID)
		names := make([]string, len(ids))
		for i, n := range ids {
			names[i] = fmt.Sprintf("e%d", n)
		}
		fenced := ""
		if l.fenced {
			fenced = " fenced"
		}
		e.event("%s: lac=%d%s entries=(%s)", line, l.lac, fenced, strings.Join(names, " "))
	}
}

func (e *env) printAcks() {
	w := e.mustWriter()
	var ok, failed []string
	for _, a := range e.acks {
		if a.Err == nil {
			ok = append(ok, fmt.Sprintf("e%d", a.EntryID))
		} else {
			failed = append(failed, fmt.Sprintf("e%d(%s)", a.EntryID, errName(a.Err)))
		}
	}
	e.event("%s acknowledged: %s", w.name, orNone(ok))
	if len(failed) > 0 {
		e.event("%s failed: %s", w.name, strings.Join(failed, " "))
	}
	e.event("%s LAC=%d pending=%d", w.name, w.writer.LastAddConfirmed(), w.writer.Pending())
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

func (e *env) printMetadata() {
	md, v, ok := e.store.get(e.ledgerID)
	if !ok {
		e.event("l%d: not found", e.ledgerID)
		return
	}
	e.event("l%d v=%d state=%s E=%d Qw=%d Qa=%d last=%d length=%d", md.ID, v, md.State, md.EnsembleSize, md.WriteQuorum, md.AckQuorum, md.LastEntryID, md.Length)
	for _, f := range md.Fragments {
		e.event("  from e%d: %s", f.FirstEntry, e.fmtEnsembleZones(f.Ensemble))
	}
}

// printPlacement shows each written entry's write quorum under the stored
// metadata: which bookies must hold it.
func (e *env) printPlacement() {
	md, _, _ := e.store.get(e.ledgerID)
	for id := int64(0); id < e.next; id++ {
		idx := ledger.WriteSet(id, md.EnsembleSize, md.WriteQuorum)
		e.event("e%d: members %v -> %s", id, idx, fmtEnsemble(md.WriteQuorumBookies(id)))
	}
}

func (e *env) printRecoveries() {
	for _, c := range e.order {
		if c.recovery == nil {
			continue
		}
		done, md, err := c.recovery.Done()
		switch {
		case !done:
			e.event("%s: %s", c.name, c.recovery.Phase())
		case err != nil:
			e.event("%s: failed: %v", c.name, err)
		default:
			e.event("%s: done: %s", c.name, fmtRecord(md))
		}
	}
}

// readLedger reads the CLOSED ledger (entries from..to, by default all of
// it) with the Reader, answering its requests from the model bookies
// directly (the script does not schedule reads): every request is shown
// with its answer, and every entry with the bookie that served it. It
// compares what it reads with what the writer had acknowledged.
func (e *env) readLedger(d *datadriven.TestData) {
	md, v, _ := e.store.get(e.ledgerID)
	if md.State != ledger.StateClosed {
		e.scriptFail("l%d is %s; read-ledger reads a CLOSED ledger", md.ID, md.State)
	}
	// Acknowledged entries past the ledger's end count as missing (a lost
	// acknowledged entry), unless the script reads only part of it.
	from, to := e.argInt(d, "from", 0), e.argInt(d, "to", md.LastEntryID)
	checkTo := e.argInt(d, "to", math.MaxInt64)
	cfg := ledger.ReaderConfig{Metadata: md,
		MaxRangesInFlight: int(e.argInt(d, "ranges", 0)),
		MaxRangeEntries:   int(e.argInt(d, "range-entries", 0)),
		MaxRangeBytes:     int(e.argInt(d, "range-bytes", 0)),
	}
	slow := map[ledger.BookieID]bool{}
	for _, id := range argList(d, "slow") {
		slow[ledger.BookieID(id)] = true
	}
	e.event("l%d v=%d CLOSED last=%d: %d entries", md.ID, v, md.LastEntryID, md.LastEntryID+1)
	acked := map[int64]bool{}
	for _, a := range e.acks {
		if a.Err == nil {
			acked[a.EntryID] = true
		}
	}
	got := map[int64]string{}
	servedBy := map[int64]ledger.BookieID{}
	if md.LastEntryID >= 0 {
		e.depth++
		rd := ledger.NewReader(cfg, from, to)
		reqs, results := rd.Ready()
		for ticks := 0; ; {
			if ticks > 1000 {
				e.scriptFail("reader not done after 1000 ticks")
			}
			for _, r := range results {
				if r.Err != nil {
					e.event("e%d: %v", r.EntryID, r.Err)
					continue
				}
				got[r.EntryID] = string(r.Payload)
				note := "recovered, never acknowledged"
				if acked[r.EntryID] {
					note = "acknowledged"
				}
				e.event("e%d %q from %s (%s)", r.EntryID, r.Payload, servedBy[r.EntryID], note)
			}
			if len(reqs) == 0 {
				if rd.Done() {
					break
				}
				ticks++
				rd.Tick()
				if reqs, results = rd.Ready(); len(reqs)+len(results) > 0 {
					e.event("tick %d:", ticks)
				}
				continue
			}
			for _, req := range reqs {
				line := fmt.Sprintf("%s <- reader %s", req.To, fmtRequest(req))
				if slow[req.To] {
					e.message("%s: no answer (slow)", line)
					continue
				}
				resp := e.bookies[req.To].handle(req)
				if resp.Status == ledger.StatusOK {
					for i := range resp.Entries {
						if _, ok := servedBy[req.EntryID+int64(i)]; !ok {
							servedBy[req.EntryID+int64(i)] = req.To
						}
					}
				}
				e.message("%s: %s", line, fmtResponse(req, resp))
				rd.Step(resp)
			}
			reqs, results = rd.Ready()
		}
		e.depth--
	}
	missing, wanted := 0, 0
	for id := range acked {
		if id < from || id > checkTo {
			continue
		}
		wanted++
		if got[id] != e.payloads[id] {
			missing++
			e.violate("acknowledged e%d (%q) reads as %q", id, e.payloads[id], got[id])
		}
	}
	e.event("every entry the writer acknowledged is in the ledger: %d of %d", wanted-missing, wanted)
}

// ---- formatting ----

func fmtEnsemble(ids []ledger.BookieID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return "(" + strings.Join(s, ",") + ")"
}

func (e *env) fmtEnsembleZones(ids []ledger.BookieID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id) + "@" + e.bookies[id].zone
	}
	return "(" + strings.Join(s, ",") + ")"
}

func fmtFragments(md ledger.Metadata) string {
	s := make([]string, len(md.Fragments))
	for i, f := range md.Fragments {
		s[i] = fmt.Sprintf("e%d:%s", f.FirstEntry, fmtEnsemble(f.Ensemble))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// fmtRecord renders a ledger record in one line.
func fmtRecord(md ledger.Metadata) string {
	if md.State == ledger.StateClosed {
		return fmt.Sprintf("state=CLOSED last=%d length=%d %s", md.LastEntryID, md.Length, fmtFragments(md))
	}
	return fmt.Sprintf("state=%s %s", md.State, fmtFragments(md))
}

func fmtRequest(r ledger.Request) string {
	var s string
	switch requestKind(r) {
	case "add":
		s = fmt.Sprintf("add e%d lac=%d", r.EntryID, r.LastAddConfirmed)
		if r.Recovery {
			s += " recovery"
		}
	case "read-lac":
		s = "read-lac"
	case "read-range":
		s = fmt.Sprintf("read e%d..e%d", r.EntryID, r.EntryID+int64(r.MaxEntries)-1)
		if r.MaxBytes != ledger.DefaultMaxRangeBytes {
			s += fmt.Sprintf(" max-bytes=%d", r.MaxBytes)
		}
	case "write-lac":
		s = fmt.Sprintf("write-lac lac=%d", r.LastAddConfirmed)
	default:
		s = fmt.Sprintf("read e%d", r.EntryID)
	}
	if r.Fence {
		s += " fence"
	}
	return s
}

func fmtResponse(req ledger.Request, resp ledger.Response) string {
	if resp.Status == ledger.StatusOK && requestKind(req) == "read-lac" {
		return fmt.Sprintf("ok lac=%d", resp.LastAddConfirmed)
	}
	if resp.Status == ledger.StatusOK && requestKind(req) == "read-range" {
		if len(resp.Entries) == 1 {
			return fmt.Sprintf("ok e%d", req.EntryID)
		}
		return fmt.Sprintf("ok e%d..e%d", req.EntryID, req.EntryID+int64(len(resp.Entries))-1)
	}
	return resp.Status.String()
}

// fmtMetaOp renders a metadata operation; full adds the proposed record.
func fmtMetaOp(op ledger.MetaOp, full bool) string {
	if op.Kind == ledger.MetaRead {
		return fmt.Sprintf("read l%d", op.LedgerID)
	}
	if full {
		return fmt.Sprintf("cas l%d v=%d -> %s", op.LedgerID, op.Expected, fmtRecord(op.Metadata))
	}
	return fmt.Sprintf("cas l%d v=%d state=%s", op.LedgerID, op.Expected, op.Metadata.State)
}

func (e *env) fmtMetaResult(op ledger.MetaOp, res ledger.MetaResult) string {
	switch {
	case res.Err == nil && op.Kind == ledger.MetaRead:
		return fmt.Sprintf("v=%d %s", res.Version, fmtRecord(res.Metadata))
	case res.Err == nil:
		return fmt.Sprintf("ok v=%d", res.Version)
	case errors.Is(res.Err, meta.ErrBadVersion):
		cur, v, _ := e.store.get(op.LedgerID)
		return fmt.Sprintf("bad version (l%d is at v=%d state=%s)", op.LedgerID, v, cur.State)
	}
	return res.Err.Error()
}

func errName(err error) string {
	switch {
	case errors.Is(err, ledger.ErrFenced):
		return "fenced"
	case errors.Is(err, ledger.ErrClosed):
		return "closed"
	case errors.Is(err, ledger.ErrTooManyInFlight):
		return "too-many-in-flight"
	}
	return err.Error()
}
