package broker

// The admin API's stats, internalStats and partitioned-stats, in Pulsar's
// JSON (the field names of pulsar-client-go's pulsaradmin utils.TopicStats
// and PersistentTopicInternalStats). Counters and rates come from the
// front end (what producers appended and consumers were sent since the
// topic was loaded here; rates over the last 10 s: pulsar_metrics.go);
// sizes, backlogs and cursor positions from the managed ledger.
//
// msgBacklog counts entries (a batch is one), as Pulsar's does; the
// topic's backlogSize is the largest of its durable subscriptions'.
// individuallyDeletedMessages lists the acknowledged ranges above the
// mark-delete position as Pulsar prints them ("[(3:5..3:7], (3:9..3:10]]",
// each range open below), found by walking the unacknowledged entries: at
// most maxRangesWalk of them, so a cursor with a longer stretch of holes
// shows its first ranges only. Non-durable (readers') cursors show none.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"quire/internal/mlog"
	"quire/internal/mlog/mlogclient"
	"quire/internal/pulsar"
)

type publisherStatsJSON struct {
	AccessMode      string  `json:"accessMode"`
	ProducerID      uint64  `json:"producerId"`
	ProducerName    string  `json:"producerName"`
	Address         string  `json:"address"`
	MsgRateIn       float64 `json:"msgRateIn"`
	MsgThroughputIn float64 `json:"msgThroughputIn"`
	AverageMsgSize  float64 `json:"averageMsgSize"`
	MsgInCounter    int64   `json:"msgInCounter"`
	BytesInCounter  int64   `json:"bytesInCounter"`
	ClientVersion   string  `json:"clientVersion"`
	// Metadata is the producer's properties, {} when none (as Pulsar).
	Metadata map[string]string `json:"metadata"`
}

type consumerStatsJSON struct {
	ConsumerName                 string  `json:"consumerName"`
	Address                      string  `json:"address"`
	AvailablePermits             int64   `json:"availablePermits"`
	UnackedMessages              int64   `json:"unackedMessages"`
	BlockedConsumerOnUnackedMsgs bool    `json:"blockedConsumerOnUnackedMsgs"`
	MsgRateOut                   float64 `json:"msgRateOut"`
	MsgThroughputOut             float64 `json:"msgThroughputOut"`
	MsgRateRedeliver             float64 `json:"msgRateRedeliver"`
	// Metadata is the consumer's properties, {} when it has none (as
	// Pulsar).
	Metadata map[string]string `json:"metadata"`
}

type subscriptionStatsJSON struct {
	Type                               string              `json:"type"`
	IsDurable                          bool                `json:"isDurable"`
	MsgRateOut                         float64             `json:"msgRateOut"`
	MsgThroughputOut                   float64             `json:"msgThroughputOut"`
	MsgRateRedeliver                   float64             `json:"msgRateRedeliver"`
	MsgOutCounter                      int64               `json:"msgOutCounter"`
	BytesOutCounter                    int64               `json:"bytesOutCounter"`
	MsgBacklog                         int64               `json:"msgBacklog"`
	MsgBacklogNoDelayed                int64               `json:"msgBacklogNoDelayed"`
	BacklogSize                        int64               `json:"backlogSize"`
	UnackedMessages                    int64               `json:"unackedMessages"`
	BlockedSubscriptionOnUnackedMsgs   bool                `json:"blockedSubscriptionOnUnackedMsgs"`
	NonContiguousDeletedMessagesRanges int                 `json:"nonContiguousDeletedMessagesRanges"`
	ActiveConsumerName                 string              `json:"activeConsumerName,omitempty"`
	Consumers                          []consumerStatsJSON `json:"consumers"`
}

type topicStatsJSON struct {
	MsgRateIn                          float64                          `json:"msgRateIn"`
	MsgRateOut                         float64                          `json:"msgRateOut"`
	MsgThroughputIn                    float64                          `json:"msgThroughputIn"`
	MsgThroughputOut                   float64                          `json:"msgThroughputOut"`
	MsgInCounter                       int64                            `json:"msgInCounter"`
	BytesInCounter                     int64                            `json:"bytesInCounter"`
	MsgOutCounter                      int64                            `json:"msgOutCounter"`
	BytesOutCounter                    int64                            `json:"bytesOutCounter"`
	AverageMsgSize                     float64                          `json:"averageMsgSize"`
	StorageSize                        int64                            `json:"storageSize"`
	BacklogSize                        int64                            `json:"backlogSize"`
	NonContiguousDeletedMessagesRanges int                              `json:"nonContiguousDeletedMessagesRanges"`
	Publishers                         []publisherStatsJSON             `json:"publishers"`
	Subscriptions                      map[string]subscriptionStatsJSON `json:"subscriptions"`
	Replication                        map[string]struct{}              `json:"replication"`
	DeduplicationStatus                string                           `json:"deduplicationStatus"`
	OwnerBroker                        string                           `json:"ownerBroker,omitempty"`
}

type partitionedStatsJSON struct {
	topicStatsJSON
	Metadata   map[string]int            `json:"metadata"`
	Partitions map[string]topicStatsJSON `json:"partitions,omitempty"`
}

type ledgerInfoJSON struct {
	LedgerID  int64 `json:"ledgerId"`
	Entries   int64 `json:"entries"`
	Size      int64 `json:"size"`
	Timestamp int64 `json:"timestamp"`
	Offloaded bool  `json:"offloaded"`
}

type cursorStatsJSON struct {
	MarkDeletePosition                       string           `json:"markDeletePosition"`
	ReadPosition                             string           `json:"readPosition"`
	IndividuallyDeletedMessages              string           `json:"individuallyDeletedMessages"`
	NumberOfEntriesSinceFirstNotAckedMessage int64            `json:"numberOfEntriesSinceFirstNotAckedMessage"`
	TotalNonContiguousDeletedMessagesRange   int              `json:"totalNonContiguousDeletedMessagesRange"`
	State                                    string           `json:"state"`
	Properties                               map[string]int64 `json:"properties"`
}

type internalStatsJSON struct {
	EntriesAddedCounter    int64                      `json:"entriesAddedCounter"`
	NumberOfEntries        int64                      `json:"numberOfEntries"`
	TotalSize              int64                      `json:"totalSize"`
	CurrentLedgerEntries   int64                      `json:"currentLedgerEntries"`
	CurrentLedgerSize      int64                      `json:"currentLedgerSize"`
	LastConfirmedEntry     string                     `json:"lastConfirmedEntry"`
	State                  string                     `json:"state"`
	PendingAddEntriesCount int                        `json:"pendingAddEntriesCount"`
	Ledgers                []ledgerInfoJSON           `json:"ledgers"`
	Cursors                map[string]cursorStatsJSON `json:"cursors"`
}

func positionString(p mlog.Position) string { return fmt.Sprintf("%d:%d", p.LedgerID, p.EntryID) }

// entriesAfter counts the entries of ls after p.
func entriesAfter(ls []mlog.LedgerInfo, p mlog.Position) int64 {
	var n int64
	for _, l := range ls {
		switch {
		case l.ID > p.LedgerID:
			n += l.Entries
		case l.ID == p.LedgerID:
			n += max(0, l.Entries-1-p.EntryID)
		}
	}
	return n
}

func (a *pulsarAdmin) stats(w http.ResponseWriter, r *http.Request) error {
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	if tp.partitions > 0 {
		return restErrorf(http.StatusNotFound, "%s is a partitioned topic: ask its partitioned-stats", tp.name)
	}
	t, err := a.servedTopic(w, r, tp.name)
	if t == nil || err != nil {
		return err
	}
	st, err := a.topicStats(r.Context(), t)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// topicStats builds a loaded topic's stats.
func (a *pulsarAdmin) topicStats(ctx context.Context, t *pulsarTopic) (topicStatsJSON, error) {
	pb := t.pb
	st, err := t.ml.Stats(ctx)
	if err != nil {
		return topicStatsJSON{}, pulsarErr(err, pulsar.ErrPersistence)
	}
	ls, err := t.ml.Ledgers(ctx)
	if err != nil {
		return topicStatsJSON{}, pulsarErr(err, pulsar.ErrPersistence)
	}
	fe, _ := pb.server.TopicStats(t.name)
	rate := pb.rates.rates(t.name, flatten(fe, time.Now()))
	out := topicStatsJSON{
		MsgRateIn: rate(rateKeyIn()), MsgThroughputIn: rate(rateKeyInBytes()),
		MsgInCounter: fe.MsgIn, BytesInCounter: fe.BytesIn, StorageSize: st.StorageSize,
		Publishers: []publisherStatsJSON{}, Subscriptions: map[string]subscriptionStatsJSON{},
		Replication: map[string]struct{}{}, DeduplicationStatus: "Disabled", OwnerBroker: a.b.cfg.HTTPAddr,
	}
	if t.dedup {
		out.DeduplicationStatus = "Enabled"
	}
	if fe.MsgIn > 0 {
		out.AverageMsgSize = float64(fe.BytesIn) / float64(fe.MsgIn)
	}
	for _, p := range fe.Producers {
		ps := publisherStatsJSON{AccessMode: "Shared", ProducerID: p.ID, ProducerName: p.Name, Address: p.Address,
			MsgRateIn: rate(rateKeyProducerIn(p.Name)), MsgThroughputIn: rate(rateKeyProducerBytes(p.Name)),
			MsgInCounter: p.MsgIn, BytesInCounter: p.BytesIn, ClientVersion: p.ClientVersion,
			Metadata: nonNilMap(p.Metadata)}
		if p.Exclusive {
			ps.AccessMode = "Exclusive"
		}
		if p.MsgIn > 0 {
			ps.AverageMsgSize = float64(p.BytesIn) / float64(p.MsgIn)
		}
		out.Publishers = append(out.Publishers, ps)
	}
	for _, cs := range st.Cursors {
		out.Subscriptions[cs.Name] = subscriptionStatsJSON{Type: "Exclusive", IsDurable: true,
			MsgBacklog: cs.BacklogEntries, MsgBacklogNoDelayed: cs.BacklogEntries, BacklogSize: cs.BacklogBytes,
			NonContiguousDeletedMessagesRanges: cs.Holes, Consumers: []consumerStatsJSON{}}
		out.BacklogSize = max(out.BacklogSize, cs.BacklogBytes)
		out.NonContiguousDeletedMessagesRanges += cs.Holes
	}
	for name, s := range fe.Subscriptions {
		ss, durable := out.Subscriptions[name]
		if !durable {
			if s.Durable {
				continue // deleted meanwhile
			}
			ss = subscriptionStatsJSON{Consumers: []consumerStatsJSON{}}
			t.mu.Lock()
			c := t.nonDurable[name]
			t.mu.Unlock()
			if c != nil {
				if md, err := c.MarkDelete(ctx); err == nil {
					ss.MsgBacklog = entriesAfter(ls, md)
					ss.MsgBacklogNoDelayed = ss.MsgBacklog
				}
			}
		}
		ss.Type = s.Type
		ss.UnackedMessages = s.Unacked
		ss.BlockedSubscriptionOnUnackedMsgs = s.Blocked
		ss.MsgOutCounter, ss.BytesOutCounter = s.MsgOut, s.BytesOut
		ss.MsgRateOut, ss.MsgThroughputOut = rate(rateKeyOut(name)), rate(rateKeyOutBytes(name))
		ss.MsgRateRedeliver = rate(rateKeyRedeliver(name))
		ss.ActiveConsumerName = s.ActiveConsumer
		for _, c := range s.Consumers {
			ss.Consumers = append(ss.Consumers, consumerStatsJSON{ConsumerName: c.Name, Address: c.Address,
				AvailablePermits: c.Permits, UnackedMessages: c.Unacked, BlockedConsumerOnUnackedMsgs: c.Blocked,
				Metadata: nonNilMap(c.Metadata)})
		}
		out.Subscriptions[name] = ss
	}
	for _, ss := range out.Subscriptions {
		out.MsgOutCounter += ss.MsgOutCounter
		out.BytesOutCounter += ss.BytesOutCounter
		out.MsgRateOut += ss.MsgRateOut
		out.MsgThroughputOut += ss.MsgThroughputOut
	}
	return out, nil
}

func (a *pulsarAdmin) internalStats(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	if tp.partitions > 0 {
		return restErrorf(http.StatusNotFound, "%s is a partitioned topic: ask its partitions", tp.name)
	}
	t, err := a.servedTopic(w, r, tp.name)
	if t == nil || err != nil {
		return err
	}
	st, err := t.ml.Stats(ctx)
	if err != nil {
		return pulsarErr(err, pulsar.ErrPersistence)
	}
	ls, err := t.ml.Ledgers(ctx)
	if err != nil {
		return pulsarErr(err, pulsar.ErrPersistence)
	}
	out := internalStatsJSON{
		EntriesAddedCounter: t.added.Load(), NumberOfEntries: st.Entries, TotalSize: st.StorageSize,
		LastConfirmedEntry: positionString(toPosition(t.LastMessageID())), State: st.Phase,
		PendingAddEntriesCount: st.AppendsInFlight + st.QueuedAppends,
		Ledgers:                []ledgerInfoJSON{}, Cursors: map[string]cursorStatsJSON{},
	}
	for _, l := range ls {
		out.Ledgers = append(out.Ledgers, ledgerInfoJSON{LedgerID: l.ID, Entries: l.Entries, Size: l.Size, Timestamp: l.Created.UnixMilli()})
	}
	if n := len(ls); n > 0 {
		out.CurrentLedgerEntries, out.CurrentLedgerSize = ls[n-1].Entries, ls[n-1].Size
	}
	fe, _ := t.pb.server.TopicStats(t.name)
	readPosition := func(name string, md mlog.Position) string {
		if s, ok := fe.Subscriptions[name]; ok {
			return positionString(toPosition(s.ReadPosition))
		}
		return positionString(positionAfter(ls, md))
	}
	for _, cs := range st.Cursors {
		ranges := "[]"
		if cs.Holes > 0 {
			if _, c, err := adminCursor(ctx, t, cs.Name); err == nil && c != nil {
				if ranges, err = ackedRanges(ctx, c, ls, cs.MarkDelete); err != nil {
					return pulsarErr(err, pulsar.ErrPersistence)
				}
			}
		}
		out.Cursors[cs.Name] = cursorStatsJSON{
			MarkDeletePosition: positionString(cs.MarkDelete), ReadPosition: readPosition(cs.Name, cs.MarkDelete),
			IndividuallyDeletedMessages: ranges, NumberOfEntriesSinceFirstNotAckedMessage: entriesAfter(ls, cs.MarkDelete),
			TotalNonContiguousDeletedMessagesRange: cs.Holes, State: "Open", Properties: map[string]int64{},
		}
	}
	t.mu.Lock()
	readers := make(map[string]*mlogclient.NonDurableCursor, len(t.nonDurable))
	for name, c := range t.nonDurable {
		readers[name] = c
	}
	t.mu.Unlock()
	for name, c := range readers {
		md, err := c.MarkDelete(ctx)
		if err != nil {
			continue
		}
		out.Cursors[name] = cursorStatsJSON{MarkDeletePosition: positionString(md), ReadPosition: readPosition(name, md),
			IndividuallyDeletedMessages: "[]", NumberOfEntriesSinceFirstNotAckedMessage: entriesAfter(ls, md),
			State: "NoLedger", Properties: map[string]int64{}}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ackedRanges prints a durable cursor's individually acknowledged ranges:
// each run of entries between two unacknowledged ones (or after the last
// unacknowledged one, up to the last entry) is acknowledged.
func ackedRanges(ctx context.Context, c *mlogclient.Cursor, ls []mlog.LedgerInfo, md mlog.Position) (string, error) {
	unacked, err := c.Unacked(ctx, md, maxRangesWalk)
	if err != nil {
		return "", err
	}
	var ranges []string
	prev := md
	for _, p := range unacked {
		if next := positionAfter(ls, prev); next != p {
			if last, ok := positionBefore(ls, p); ok {
				ranges = append(ranges, fmt.Sprintf("(%s..%s]", positionString(prev), positionString(last)))
			}
		}
		prev = p
	}
	if len(unacked) < maxRangesWalk && len(unacked) > 0 {
		// Everything after the last unacknowledged entry is acknowledged.
		if end, ok := lastEntry(ls); ok && prev.Less(end) {
			ranges = append(ranges, fmt.Sprintf("(%s..%s]", positionString(prev), positionString(end)))
		}
	}
	return "[" + strings.Join(ranges, ", ") + "]", nil
}

func lastEntry(ls []mlog.LedgerInfo) (mlog.Position, bool) {
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].Entries > 0 {
			return mlog.Position{LedgerID: ls[i].ID, EntryID: ls[i].Entries - 1}, true
		}
	}
	return mlog.Position{}, false
}

// partitionedStats sums the partitions' stats (each from its owner).
func (a *pulsarAdmin) partitionedStats(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	if tp.partitions == 0 {
		return restErrorf(http.StatusNotFound, "partitioned topic %s not found", tp.name)
	}
	out := partitionedStatsJSON{
		topicStatsJSON: topicStatsJSON{Publishers: []publisherStatsJSON{}, Subscriptions: map[string]subscriptionStatsJSON{},
			Replication: map[string]struct{}{}, DeduplicationStatus: "Disabled"},
		Metadata: map[string]int{"partitions": tp.partitions},
	}
	perPartition := r.URL.Query().Get("perPartition") != "false"
	if perPartition {
		out.Partitions = map[string]topicStatsJSON{}
	}
	for i := range tp.partitions {
		part := tp.partition(i)
		pb, owner, err := a.ownerOf(ctx, part)
		if err != nil {
			return err
		}
		var ps topicStatsJSON
		if owner.ID == a.b.ID() {
			t, err := pb.topic(ctx, part, false, false)
			if err != nil {
				return err
			}
			if ps, err = a.topicStats(ctx, t); err != nil {
				return err
			}
		} else {
			_, local, _ := parsePulsarTopic(part)
			body, err := a.forward(ctx, http.MethodGet, owner, "/admin/v2/persistent/"+tp.ns+"/"+local+"/stats", nil)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(body, &ps); err != nil {
				return fmt.Errorf("stats of %s from broker %d: %w", part, owner.ID, err)
			}
		}
		out.add(ps)
		if perPartition {
			out.Partitions[part] = ps
		}
	}
	if out.MsgInCounter > 0 {
		out.AverageMsgSize = float64(out.BytesInCounter) / float64(out.MsgInCounter)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// add sums one partition's stats into the topic's.
func (s *partitionedStatsJSON) add(p topicStatsJSON) {
	s.MsgRateIn += p.MsgRateIn
	s.MsgRateOut += p.MsgRateOut
	s.MsgThroughputIn += p.MsgThroughputIn
	s.MsgThroughputOut += p.MsgThroughputOut
	s.MsgInCounter += p.MsgInCounter
	s.BytesInCounter += p.BytesInCounter
	s.MsgOutCounter += p.MsgOutCounter
	s.BytesOutCounter += p.BytesOutCounter
	s.StorageSize += p.StorageSize
	s.BacklogSize += p.BacklogSize
	s.NonContiguousDeletedMessagesRanges += p.NonContiguousDeletedMessagesRanges
	s.Publishers = append(s.Publishers, p.Publishers...)
	if p.DeduplicationStatus == "Enabled" {
		s.DeduplicationStatus = "Enabled"
	}
	for name, ps := range p.Subscriptions {
		ss, ok := s.Subscriptions[name]
		if !ok {
			ss = subscriptionStatsJSON{Type: ps.Type, IsDurable: ps.IsDurable, Consumers: []consumerStatsJSON{}}
		}
		ss.MsgRateOut += ps.MsgRateOut
		ss.MsgThroughputOut += ps.MsgThroughputOut
		ss.MsgRateRedeliver += ps.MsgRateRedeliver
		ss.MsgOutCounter += ps.MsgOutCounter
		ss.BytesOutCounter += ps.BytesOutCounter
		ss.MsgBacklog += ps.MsgBacklog
		ss.MsgBacklogNoDelayed += ps.MsgBacklogNoDelayed
		ss.BacklogSize += ps.BacklogSize
		ss.UnackedMessages += ps.UnackedMessages
		ss.BlockedSubscriptionOnUnackedMsgs = ss.BlockedSubscriptionOnUnackedMsgs || ps.BlockedSubscriptionOnUnackedMsgs
		ss.NonContiguousDeletedMessagesRanges += ps.NonContiguousDeletedMessagesRanges
		ss.Consumers = append(ss.Consumers, ps.Consumers...)
		s.Subscriptions[name] = ss
	}
}

func nonNilMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}
