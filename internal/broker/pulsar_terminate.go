package broker

// Topic termination (pulsar.Terminator, and the admin API's POST
// .../{topic}/terminate).
//
// A terminated topic takes no append again. Termination is recorded in the
// metadata store beside the topic's other Pulsar records, as one JSON
// record pulsarTerminatedKey(topic) holding the last message id; the next
// owner reads it when it loads the topic (takeover, unload, restart), so
// the topic stays terminated. Deviation from Pulsar, which keeps the
// terminated position in the managed ledger's own metadata: Quire's managed
// ledger record has no properties, so the record lives beside it, and is
// deleted with the topic.
//
// Terminate first refuses appends (ErrTopicTerminated), then waits for the
// appends in flight to be answered, so that the last entry is final, then
// writes the record and answers the last message id.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"quire/internal/meta"
	"quire/internal/pulsar"
)

const pulsarTerminatedPrefix = "/quire/pulsar/terminated/"

func pulsarTerminatedKey(topic string) string { return pulsarTerminatedPrefix + topic }

// pulsarTerminatedRecord is the termination record: the last entry's id
// (-1:-1 for a topic terminated empty).
type pulsarTerminatedRecord struct {
	LedgerID int64 `json:"ledgerId"`
	EntryID  int64 `json:"entryId"`
}

var _ pulsar.Terminator = (*pulsarTopic)(nil)

// loadTermination reads the topic's termination record, at load.
func (t *pulsarTopic) loadTermination(ctx context.Context) error {
	var rec pulsarTerminatedRecord
	_, err := meta.GetJSON(ctx, t.pb.b.cfg.Store, pulsarTerminatedKey(t.name), &rec)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("termination record of %s: %w", t.name, err)
	}
	t.mu.Lock()
	t.terminating, t.terminated = true, true
	t.terminatedAt = pulsar.MessageID{LedgerID: rec.LedgerID, EntryID: rec.EntryID}
	t.mu.Unlock()
	return nil
}

// Terminated implements pulsar.Terminator: the termination is recorded.
func (t *pulsarTopic) Terminated() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.terminated
}

// admitAppend counts an append in flight, or refuses it on a terminating
// topic.
func (t *pulsarTopic) admitAppend() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.terminating {
		return fmt.Errorf("%w: %s", pulsar.ErrTopicTerminated, t.name)
	}
	t.appending++
	return nil
}

// appendDone ends an append counted by admitAppend.
func (t *pulsarTopic) appendDone() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.appending--
	if t.appending == 0 && t.drained != nil {
		close(t.drained)
		t.drained = nil
	}
}

// Terminate implements pulsar.Terminator.
func (t *pulsarTopic) Terminate(ctx context.Context) (pulsar.MessageID, error) {
	t.mu.Lock()
	if t.terminated {
		at := t.terminatedAt
		t.mu.Unlock()
		return at, nil
	}
	t.terminating = true
	var drained chan struct{}
	if t.appending > 0 {
		if t.drained == nil {
			t.drained = make(chan struct{})
		}
		drained = t.drained
	}
	t.mu.Unlock()
	if drained != nil {
		select {
		case <-drained:
		case <-t.ml.Done():
			return pulsar.MessageID{}, fmt.Errorf("%w: %s is no longer served here", pulsar.ErrServiceNotReady, t.name)
		case <-ctx.Done():
			return pulsar.MessageID{}, ctx.Err()
		}
	}
	last := t.LastMessageID()
	data, err := json.Marshal(pulsarTerminatedRecord{LedgerID: last.LedgerID, EntryID: last.EntryID})
	if err != nil {
		return pulsar.MessageID{}, err
	}
	store := t.pb.b.cfg.Store
	if _, err := store.Create(ctx, pulsarTerminatedKey(t.name), data); errors.Is(err, meta.ErrExists) {
		// Terminated concurrently (or by a previous owner that lost the
		// topic before answering): that record is the answer.
		var rec pulsarTerminatedRecord
		if _, err := meta.GetJSON(ctx, store, pulsarTerminatedKey(t.name), &rec); err != nil {
			return pulsar.MessageID{}, pulsarErr(fmt.Errorf("termination record of %s: %w", t.name, err), pulsar.ErrMetadata)
		}
		last = pulsar.MessageID{LedgerID: rec.LedgerID, EntryID: rec.EntryID}
	} else if err != nil {
		return pulsar.MessageID{}, pulsarErr(fmt.Errorf("record the termination of %s: %w", t.name, err), pulsar.ErrMetadata)
	}
	t.mu.Lock()
	t.terminated, t.terminatedAt = true, last
	t.mu.Unlock()
	return last, nil
}

// terminate answers POST /admin/v2/persistent/{tenant}/{ns}/{topic}/terminate
// with the last message id, as Pulsar does ({"ledgerId", "entryId",
// "partitionIndex": -1}). A partitioned topic's name is refused (405, as in
// Pulsar): terminate its partitions.
func (a *pulsarAdmin) terminate(w http.ResponseWriter, r *http.Request) error {
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	if tp.partitions > 0 {
		return restErrorf(http.StatusMethodNotAllowed, "termination of a partitioned topic is not allowed: terminate its partitions")
	}
	t, err := a.servedTopic(w, r, tp.name)
	if err != nil || t == nil {
		return err
	}
	last, err := t.pb.server.TerminateTopic(r.Context(), tp.name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int64{"ledgerId": last.LedgerID, "entryId": last.EntryID, "partitionIndex": -1})
	return nil
}

// deleteTermination removes a deleted topic's termination record, so that
// a topic created again under the name starts unterminated.
func deleteTermination(ctx context.Context, store meta.Store, topic string) error {
	key := pulsarTerminatedKey(topic)
	kv, err := store.Get(ctx, key)
	if errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	if err == nil {
		err = store.Delete(ctx, key, kv.Version)
	}
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("delete the termination record of %s: %w", topic, err)
	}
	return nil
}
