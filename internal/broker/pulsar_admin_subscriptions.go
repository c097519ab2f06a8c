package broker

// The admin API's subscription endpoints: list, create, delete, skip,
// reset cursor and expire (see pulsar_admin.go); and reading one entry by
// its message id (GET .../{topic}/ledger/{ledger}/entry/{entry}, what
// pulsar-admin's get-message-by-id and the Go admin's GetMessagesByID call).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"quire/internal/mlog"
	"quire/internal/mlog/mlogclient"
	"quire/internal/pulsar"
)

// --- subscriptions ---

// subscriptionOf reports whether the topic has the named subscription, and
// whether it is durable.
func subscriptionOf(ctx context.Context, t *pulsarTopic, name string) (durable, ok bool, err error) {
	t.mu.Lock()
	_, nonDurable := t.nonDurable[name]
	t.mu.Unlock()
	if nonDurable {
		return false, true, nil
	}
	st, err := t.ml.Stats(ctx)
	if err != nil {
		return false, false, pulsarErr(err, pulsar.ErrPersistence)
	}
	for _, c := range st.Cursors {
		if c.Name == name {
			return true, true, nil
		}
	}
	return false, false, nil
}

// adminCursor returns an existing subscription's cursor (404 when none).
func adminCursor(ctx context.Context, t *pulsarTopic, name string) (*pulsarCursor, *mlogclient.Cursor, error) {
	durable, ok, err := subscriptionOf(ctx, t, name)
	switch {
	case err != nil:
		return nil, nil, err
	case !ok:
		return nil, nil, restErrorf(http.StatusNotFound, "subscription %s not found on %s", name, t.name)
	case !durable:
		t.mu.Lock()
		c := t.nonDurable[name]
		t.mu.Unlock()
		if c == nil {
			return nil, nil, restErrorf(http.StatusNotFound, "subscription %s not found on %s", name, t.name)
		}
		return &pulsarCursor{t: t, c: c}, nil, nil
	}
	// An existing cursor keeps its position: the one given is unused.
	c, err := t.ml.OpenCursorAt(ctx, name, mlog.Position{LedgerID: -1, EntryID: -1})
	if err != nil {
		return nil, nil, pulsarErr(err, pulsar.ErrPersistence)
	}
	return &pulsarCursor{t: t, c: c}, c, nil
}

// subscriptionNames lists a topic's subscriptions: durable cursors and the
// readers' in-memory ones.
func subscriptionNames(ctx context.Context, t *pulsarTopic) ([]string, error) {
	st, err := t.ml.Stats(ctx)
	if err != nil {
		return nil, pulsarErr(err, pulsar.ErrPersistence)
	}
	var out []string
	for _, c := range st.Cursors {
		out = append(out, c.Name)
	}
	t.mu.Lock()
	for name := range t.nonDurable {
		out = append(out, name)
	}
	t.mu.Unlock()
	slices.Sort(out)
	return out, nil
}

func (a *pulsarAdmin) listSubscriptions(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	if tp.partitions == 0 {
		t, err := a.servedTopic(w, r, tp.name)
		if t == nil || err != nil {
			return err
		}
		names, err := subscriptionNames(ctx, t)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, nonNil(names))
		return nil
	}
	all := map[string]bool{}
	for i := range tp.partitions {
		part := tp.partition(i)
		pb, owner, err := a.ownerOf(ctx, part)
		if err != nil {
			return err
		}
		var names []string
		if owner.ID == a.b.ID() {
			t, err := pb.topic(ctx, part, false, false)
			if err != nil {
				return err
			}
			if names, err = subscriptionNames(ctx, t); err != nil {
				return err
			}
		} else {
			body, err := a.forward(ctx, http.MethodGet, owner, tp.partitionPath(r, i), nil)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(body, &names); err != nil {
				return fmt.Errorf("subscriptions of %s from broker %d: %w", part, owner.ID, err)
			}
		}
		for _, n := range names {
			all[n] = true
		}
	}
	out := make([]string, 0, len(all))
	for n := range all {
		out = append(out, n)
	}
	slices.Sort(out)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// messageIDJSON is Pulsar's MessageIdImpl (and ResetCursorData) in JSON.
type messageIDJSON struct {
	LedgerID       int64 `json:"ledgerId"`
	EntryID        int64 `json:"entryId"`
	PartitionIndex int   `json:"partitionIndex"`
	BatchIndex     int   `json:"batchIndex"`
	IsExcluded     bool  `json:"isExcluded"`
}

// position is where the id asks a subscription to start: the first entry
// to deliver (after the id when excluded).
func (m messageIDJSON) position() pulsar.MessageID {
	id := pulsar.MessageID{LedgerID: m.LedgerID, EntryID: m.EntryID}
	switch {
	case m.LedgerID < 0 || m.EntryID < 0:
		return pulsar.Earliest
	case m.LedgerID == math.MaxInt64:
		return pulsar.Latest
	case m.IsExcluded:
		id.EntryID++
	}
	return id
}

func (a *pulsarAdmin) createSubscription(w http.ResponseWriter, r *http.Request) error {
	sub := r.PathValue("sub")
	raw, err := readBody(w, r)
	if err != nil {
		return err
	}
	start := pulsar.Latest // Pulsar's default
	if len(raw) > 0 {
		var body messageIDJSON
		if err := json.Unmarshal(raw, &body); err != nil {
			return restErrorf(http.StatusBadRequest, "bad message id: %v", err)
		}
		start = body.position()
	}
	r.Body = io.NopCloser(bytes.NewReader(raw)) // for the partitions' owners
	return a.subscriptionOp(w, r, func(ctx context.Context, t *pulsarTopic) error {
		if _, ok, err := subscriptionOf(ctx, t, sub); err != nil || ok {
			if ok {
				return restErrorf(http.StatusConflict, "subscription %s already exists for topic %s", sub, t.name)
			}
			return err
		}
		md := start // Topic.Subscription takes a mark-delete position
		if start != pulsar.Earliest && start != pulsar.Latest {
			md.EntryID--
		}
		_, err := t.Subscription(ctx, sub, true, md)
		return err
	})
}

func (a *pulsarAdmin) deleteSubscription(w http.ResponseWriter, r *http.Request) error {
	sub := r.PathValue("sub")
	force := r.URL.Query().Get("force") == "true"
	return a.subscriptionOp(w, r, func(ctx context.Context, t *pulsarTopic) error {
		if _, ok, err := subscriptionOf(ctx, t, sub); err != nil || !ok {
			if err == nil {
				err = restErrorf(http.StatusNotFound, "subscription %s not found on %s", sub, t.name)
			}
			return err
		}
		if n := t.pb.server.CloseSubscription(t.name, sub, force); n > 0 {
			return restErrorf(http.StatusPreconditionFailed, "subscription %s has %d active consumers", sub, n)
		}
		return t.DeleteSubscription(ctx, sub)
	})
}

// skip acknowledges the next n unacknowledged entries of a durable
// subscription.
func (a *pulsarAdmin) skip(w http.ResponseWriter, r *http.Request) error {
	sub := r.PathValue("sub")
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 {
		return restErrorf(http.StatusPreconditionFailed, "skip %q: want a count >= 0", r.PathValue("n"))
	}
	return a.subscriptionOp(w, r, func(ctx context.Context, t *pulsarTopic) error {
		_, durable, err := adminCursor(ctx, t, sub)
		if err != nil {
			return err
		}
		if durable == nil {
			return restErrorf(http.StatusPreconditionFailed, "skip on the non-durable subscription %s is not supported", sub)
		}
		md, err := durable.MarkDelete(ctx)
		if err != nil {
			return pulsarErr(err, pulsar.ErrPersistence)
		}
		ps, err := durable.Unacked(ctx, md, n)
		if err != nil || len(ps) == 0 {
			return pulsarErr(err, pulsar.ErrPersistence)
		}
		ids := make([]pulsar.MessageID, len(ps))
		for i, p := range ps {
			ids[i] = toMessageID(p)
		}
		if handled, err := t.pb.server.AckSubscription(ctx, t.name, sub, ids); handled || err != nil {
			return err
		}
		return pulsarErr(durable.AckAll(ctx, ps), pulsar.ErrPersistence)
	})
}

// reset moves a subscription so that the next entry delivered is the
// first at or after to; its consumers are closed and reconnect.
func reset(ctx context.Context, t *pulsarTopic, sub string, to pulsar.MessageID) error {
	c, _, err := adminCursor(ctx, t, sub)
	if err != nil {
		return err
	}
	if handled, err := t.pb.server.SeekSubscription(ctx, t.name, sub, to); handled || err != nil {
		return err
	}
	return c.Reset(ctx, to)
}

func (a *pulsarAdmin) resetByTime(w http.ResponseWriter, r *http.Request) error {
	sub := r.PathValue("sub")
	ts, err := strconv.ParseInt(r.PathValue("timestamp"), 10, 64)
	if err != nil || ts < 0 {
		return restErrorf(http.StatusPreconditionFailed, "reset cursor to %q: want a time in milliseconds since the epoch", r.PathValue("timestamp"))
	}
	return a.subscriptionOp(w, r, func(ctx context.Context, t *pulsarTopic) error {
		to, err := t.FindByPublishTime(ctx, uint64(ts))
		if err != nil {
			return err
		}
		return reset(ctx, t, sub, to)
	})
}

func (a *pulsarAdmin) resetByID(w http.ResponseWriter, r *http.Request) error {
	sub := r.PathValue("sub")
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	var body messageIDJSON
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	name := tp.name
	if tp.partitions > 0 {
		// The id names its partition: reset that one.
		if body.PartitionIndex < 0 || body.PartitionIndex >= tp.partitions {
			return restErrorf(http.StatusPreconditionFailed, "message id of partition %d: %s has %d partitions", body.PartitionIndex, tp.name, tp.partitions)
		}
		name = tp.partition(body.PartitionIndex)
		pb, owner, err := a.ownerOf(r.Context(), name)
		if err != nil {
			return err
		}
		if owner.ID != a.b.ID() {
			payload, _ := json.Marshal(body)
			if _, err := a.forward(r.Context(), http.MethodPost, owner, tp.partitionPath(r, body.PartitionIndex), payload); err != nil {
				return err
			}
			return noContent(w)
		}
		t, err := pb.topic(r.Context(), name, false, false)
		if err != nil {
			return err
		}
		if err := reset(r.Context(), t, sub, body.position()); err != nil {
			return err
		}
		return noContent(w)
	}
	t, err := a.servedTopic(w, r, name)
	if t == nil || err != nil {
		return err
	}
	if err := reset(r.Context(), t, sub, body.position()); err != nil {
		return err
	}
	return noContent(w)
}

// expire acknowledges every entry published more than the given seconds
// ago (by the producers' publish time), moving the mark-delete position
// forward (never back).
func (a *pulsarAdmin) expire(w http.ResponseWriter, r *http.Request) error {
	sub := r.PathValue("sub")
	seconds, err := strconv.ParseInt(r.PathValue("seconds"), 10, 64)
	if err != nil || seconds < 0 {
		return restErrorf(http.StatusPreconditionFailed, "expire %q: want seconds >= 0", r.PathValue("seconds"))
	}
	cutoff := time.Now().Add(-time.Duration(seconds) * time.Second).UnixMilli()
	return a.subscriptionOp(w, r, func(ctx context.Context, t *pulsarTopic) error {
		c, _, err := adminCursor(ctx, t, sub)
		if err != nil {
			return err
		}
		first, err := t.FindByPublishTime(ctx, uint64(max(cutoff, 0)))
		if err != nil {
			return err
		}
		upTo := t.LastMessageID()
		if first != pulsar.Latest {
			ls, err := t.ml.Ledgers(ctx)
			if err != nil {
				return pulsarErr(err, pulsar.ErrPersistence)
			}
			before, ok := positionBefore(ls, toPosition(first))
			if !ok {
				return nil // nothing is that old
			}
			upTo = toMessageID(before)
		}
		if upTo == pulsar.Earliest {
			return nil // an empty topic
		}
		if handled, err := t.pb.server.AckSubscriptionThrough(ctx, t.name, sub, upTo); handled || err != nil {
			return err
		}
		return c.AckCumulative(ctx, upTo)
	})
}

// positionAfter is the entry after p in the ledgers ls (p.EntryID+1 in
// p's ledger when p is the last one known).
func positionAfter(ls []mlog.LedgerInfo, p mlog.Position) mlog.Position {
	for _, l := range ls {
		switch {
		case l.ID < p.LedgerID:
		case l.ID == p.LedgerID:
			if p.EntryID+1 < l.Entries {
				return mlog.Position{LedgerID: l.ID, EntryID: p.EntryID + 1}
			}
		case l.Entries > 0:
			return mlog.Position{LedgerID: l.ID, EntryID: 0}
		}
	}
	return mlog.Position{LedgerID: p.LedgerID, EntryID: p.EntryID + 1}
}

// positionBefore is the entry before p in the ledgers ls; false when p is
// at or before the first.
func positionBefore(ls []mlog.LedgerInfo, p mlog.Position) (mlog.Position, bool) {
	for i := len(ls) - 1; i >= 0; i-- {
		l := ls[i]
		switch {
		case l.ID > p.LedgerID:
		case l.ID == p.LedgerID:
			if e := min(p.EntryID-1, l.Entries-1); e >= 0 {
				return mlog.Position{LedgerID: l.ID, EntryID: e}, true
			}
		case l.Entries > 0:
			return mlog.Position{LedgerID: l.ID, EntryID: l.Entries - 1}, true
		}
	}
	return mlog.Position{}, false
}

// getMessageByID answers one entry as Pulsar does: the payload (a batch
// still in its batch format) as the body, the message id, publish time,
// batch size and properties in X-Pulsar-* headers. Deviation: a compressed
// entry is refused (412) rather than decompressed, since Quire carries no
// codecs for Pulsar's compression types.
func (a *pulsarAdmin) getMessageByID(w http.ResponseWriter, r *http.Request) error {
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	if tp.partitions > 0 {
		return restErrorf(http.StatusPreconditionFailed, "%s is a partitioned topic: ask one of its partitions", tp.name)
	}
	ledgerID, err1 := strconv.ParseInt(r.PathValue("ledger"), 10, 64)
	entryID, err2 := strconv.ParseInt(r.PathValue("entry"), 10, 64)
	if err1 != nil || err2 != nil || ledgerID < 0 || entryID < 0 {
		return restErrorf(http.StatusPreconditionFailed, "bad message id %s:%s", r.PathValue("ledger"), r.PathValue("entry"))
	}
	t, err := a.servedTopic(w, r, tp.name)
	if t == nil || err != nil {
		return err
	}
	want := mlog.Position{LedgerID: ledgerID, EntryID: entryID}
	es, err := t.ml.Read(r.Context(), want, 1)
	if err != nil {
		return pulsarErr(err, pulsar.ErrPersistence)
	}
	if len(es) == 0 || es[0].Pos != want {
		return restErrorf(http.StatusNotFound, "message %d:%d not found in %s", ledgerID, entryID, tp.name)
	}
	md, payload, err := pulsar.ParseEntry(es[0].Payload)
	if err != nil {
		return fmt.Errorf("entry %d:%d of %s: %w", ledgerID, entryID, tp.name, err)
	}
	if md.GetCompression() != 0 {
		return restErrorf(http.StatusPreconditionFailed, "message %d:%d is compressed (%v): not decompressed here", ledgerID, entryID, md.GetCompression())
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Pulsar-Message-ID", fmt.Sprintf("%d:%d", ledgerID, entryID))
	h.Set("X-Pulsar-Publish-Time", time.UnixMilli(int64(md.GetPublishTime())).UTC().Format("2006-01-02T15:04:05.000Z"))
	if md.NumMessagesInBatch != nil {
		h.Set("X-Pulsar-Num-Batch-Message", strconv.Itoa(int(md.GetNumMessagesInBatch())))
		h.Set("X-Pulsar-Batch-Size", strconv.Itoa(len(payload)))
	}
	for _, kv := range md.GetProperties() {
		h.Set("X-Pulsar-Property-"+kv.GetKey(), kv.GetValue())
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(payload) // the client went away
	return nil
}
