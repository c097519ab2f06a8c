package sim

import (
	"fmt"
	"slices"

	"quire/internal/isr"
)

// Kinds of ISR-mode violation (the checkers of `quire sim isr`).
const (
	kindISRAckedLost    = "isr-acked-lost"     // (a) an acks=all record is missing from the leader's log
	kindISRNotPrefix    = "isr-not-prefix"     // (b) a follower's log below its HW differs from the leader's
	kindISRReadVanished = "isr-read-vanished"  // (c) a record a consumer read is gone
	kindISRTwoLeaders   = "isr-two-leaders"    // (d) two brokers led one leader epoch
	kindISRDeposedAck   = "isr-deposed-ack"    // (d) a deposed leader acknowledged an acks=all write that the new leader lacks
	kindISRHWBackwards  = "isr-hw-backwards"   // (e) a leader's HW went down within its epoch
	kindISRRecordOrder  = "isr-record-regress" // a stored record went back in leader or partition epoch
	kindISRDeposedWrite = "isr-deposed-write"  // (d) a follower took records from a broker that is not its leader
)

type isrAcked struct {
	part   string // set by the scenario scripts
	offset int64
	value  string
	acks   int8
	lost   bool
}

type isrRead struct {
	offset int64
	value  string
	lost   bool
}

// isrChecker holds what the checkers remember across a run.
type isrChecker struct {
	violations []string
	seen       map[string]bool
	// unclean: partitions that had an unclean election (loss permitted).
	unclean map[string]bool
	// impaired: brokers that lost unflushed data and are not yet back in
	// every ISR they belong to; maxImpaired the most at once.
	impaired    map[isr.BrokerID]bool
	maxImpaired int
	powerLost   map[isr.BrokerID]bool // brokers that ever lost their page cache
	leaders     map[string]map[int32]isr.BrokerID
	hwMax       map[string]int64 // partition/epoch/broker → highest HW
	acked       map[string][]*isrAcked
	reads       map[string]map[int64]*isrRead
	readOrder   map[string][]*isrRead // every read once, in the order first read
	lastRecord  map[string]isr.PartitionState
}

func (c *isrChecker) init() {
	c.seen, c.unclean, c.impaired = map[string]bool{}, map[string]bool{}, map[isr.BrokerID]bool{}
	c.powerLost = map[isr.BrokerID]bool{}
	c.leaders, c.hwMax = map[string]map[int32]isr.BrokerID{}, map[string]int64{}
	c.acked, c.reads, c.lastRecord = map[string][]*isrAcked{}, map[string]map[int64]*isrRead{}, map[string]isr.PartitionState{}
	c.readOrder = map[string][]*isrRead{}
}

func (c *isrChecker) violate(s *isrSim, kind, format string, args ...any) {
	msg := kind + ": " + fmt.Sprintf(format, args...)
	if c.seen[msg] {
		return
	}
	c.seen[msg] = true
	s.e.tracef("CHECK", "VIOLATION %s", msg)
	if len(c.violations) < maxViolations {
		c.violations = append(c.violations, msg)
	}
}

// permitted reports whether the configuration and the faults allow a
// committed record of part to be lost: an unclean election, at least
// min.insync.replicas brokers losing their page cache at once, or, with
// ELR off (Kafka before KIP-966), any power loss: the last ISR member keeps
// its place through a crash and is elected again with what it flushed
// (the "last replica standing" loss ELR closes).
func (c *isrChecker) permitted(s *isrSim, part string) bool {
	return c.unclean[part] || c.maxImpaired >= s.cfg.minISR || !s.cfg.elr && c.maxImpaired > 0
}

func (s *isrSim) powerLossAmong(ids []isr.BrokerID) bool {
	for _, id := range ids {
		if s.chk.powerLost[id] {
			return true
		}
	}
	return false
}

func (c *isrChecker) impair(s *isrSim, id isr.BrokerID) {
	c.impaired[id] = true
	c.powerLost[id] = true
	n := 0
	for _, v := range c.impaired {
		if v {
			n++
		}
	}
	if n > c.maxImpaired {
		c.maxImpaired = n
		if n >= s.cfg.minISR {
			s.situation("lossy failures >= min.insync.replicas")
		}
	}
}

// recover ends a broker's impairment once it is back in the ISR of every
// partition it hosts under its current registration.
func (c *isrChecker) recoverImpaired(s *isrSim) {
	for _, b := range s.brokers {
		if !c.impaired[b.id] || !b.up || b.uncleanNext || b.registering {
			continue
		}
		back := true
		for _, part := range sortedKeys(b.logs) {
			rec := s.records[part]
			if rec == nil || !slices.Contains(rec.state.ISR, isr.Member{ID: b.id, BrokerEpoch: b.epoch}) {
				back = false
				break
			}
		}
		if back {
			c.impaired[b.id] = false
			s.e.tracef("CHECK", "%s back in every ISR after its power loss", brokerName(b.id))
		}
	}
}

func (c *isrChecker) recordWritten(s *isrSim, st isr.PartitionState) {
	if old, ok := c.lastRecord[st.Partition]; ok && !st.Newer(old) && !old.SameContent(st) {
		if !s.mutants.ISRChangeWithoutCAS {
			c.violate(s, kindISRRecordOrder, "%s: record %s stored after %s", st.Partition, st, old)
		}
	}
	c.lastRecord[st.Partition] = st.Clone()
	c.recoverImpaired(s)
}

// becameLeader: (d) at most one leader per (partition, leader epoch).
func (c *isrChecker) becameLeader(s *isrSim, b *isrBroker, ev isr.Event) {
	s.situation("became leader")
	m := c.leaders[ev.Partition]
	if m == nil {
		m = map[int32]isr.BrokerID{}
		c.leaders[ev.Partition] = m
	}
	if other, ok := m[ev.Epoch]; ok && other != b.id {
		c.violate(s, kindISRTwoLeaders, "%s: brokers %d and %d both led epoch %d", ev.Partition, other, b.id, ev.Epoch)
	}
	m[ev.Epoch] = b.id
}

// highWatermark: (e) a leader's HW never goes backwards within its epoch.
func (c *isrChecker) highWatermark(s *isrSim, b *isrBroker, ev isr.Event) {
	key := fmt.Sprintf("%s/%d/%d", ev.Partition, ev.Epoch, b.id)
	if old, ok := c.hwMax[key]; ok && ev.Offset < old {
		c.violate(s, kindISRHWBackwards, "%s: leader %d's HW went from %d to %d in epoch %d", ev.Partition, b.id, old, ev.Offset, ev.Epoch)
	}
	c.hwMax[key] = max(c.hwMax[key], ev.Offset)
}

// produceAnswered runs when a leader answers a produce request: (d) a
// leader deposed by a newer record that has taken up its leadership must
// not acknowledge an acks=all write that the new leader does not hold.
func (c *isrChecker) produceAnswered(s *isrSim, b *isrBroker, resp isr.ProduceResponse) {
	p := s.producers[resp.Partition]
	req := p.inflight[resp.ID]
	if resp.Err != nil || req == nil || req.acks != isr.AcksAll {
		return
	}
	rec := s.records[resp.Partition]
	if rec == nil || rec.state.LeaderEpoch <= resp.LeaderEpoch {
		return
	}
	s.situation("ack from a deposed leader's epoch")
	nb, nr := s.leaderOf(resp.Partition)
	if nb == nil || nb == b {
		return
	}
	l := nb.logs[resp.Partition]
	for i, v := range req.values {
		got, _, ok := l.Record(resp.BaseOffset + int64(i))
		if (!ok || string(got) != v) && !c.permitted(s, resp.Partition) {
			c.violate(s, kindISRDeposedAck, "%s: deposed leader %d (epoch %d) acknowledged %s at %d with acks=all; leader %d of epoch %d lacks it",
				resp.Partition, b.id, resp.LeaderEpoch, v, resp.BaseOffset+int64(i), nb.id, nr.LeaderEpoch())
		}
	}
}

// fetchApplied: (d) a follower's log changes only through its own
// leader's answers (KIP-320): records from a deposed leader's late answer
// must not get in.
func (c *isrChecker) fetchApplied(s *isrSim, b *isrBroker, r *isr.Replica, resp isr.FetchResponse, leo int64, epoch int32) {
	l := b.logs[resp.Partition]
	if len(resp.Batches) == 0 || l.EndOffset() == leo && l.LatestEpoch() == epoch {
		return
	}
	if st := r.State(); resp.From != st.Leader || resp.LeaderEpoch != st.LeaderEpoch {
		c.violate(s, kindISRDeposedWrite, "%s: follower %d took records from broker %d (epoch %d), not from its leader %d (epoch %d)",
			resp.Partition, b.id, resp.From, resp.LeaderEpoch, st.Leader, st.LeaderEpoch)
	}
}

// acknowledged records what the producer was told.
func (c *isrChecker) acknowledged(s *isrSim, resp isr.ProduceResponse, req *isrRequest) {
	for i, v := range req.values {
		c.acked[resp.Partition] = append(c.acked[resp.Partition], &isrAcked{offset: resp.BaseOffset + int64(i), value: v, acks: req.acks})
		if req.acks == isr.AcksAll {
			s.stats.AckedAll++
		} else {
			s.stats.AckedLeader++
		}
	}
	if req.acks == isr.AcksAll {
		s.situation("acks=all acknowledged")
	}
}

// consumed: (c) a record read at an offset is never replaced there.
func (c *isrChecker) consumed(s *isrSim, part string, offset int64, value string) {
	m := c.reads[part]
	if m == nil {
		m = map[int64]*isrRead{}
		c.reads[part] = m
	}
	s.stats.Consumed++
	if old := m[offset]; old != nil && old.value != value {
		if !old.lost {
			old.lost = true
			c.readLost(s, part, offset, old.value, fmt.Sprintf("a consumer now reads %s there", value))
		}
		c.addRead(part, offset, value)
		return
	}
	if m[offset] == nil {
		c.addRead(part, offset, value)
	}
}

func (c *isrChecker) addRead(part string, offset int64, value string) {
	rd := &isrRead{offset: offset, value: value}
	c.reads[part][offset] = rd
	c.readOrder[part] = append(c.readOrder[part], rd)
}

func (c *isrChecker) readLost(s *isrSim, part string, offset int64, value, why string) {
	if c.permitted(s, part) {
		s.stats.LostConsumed++
		s.situation("permitted loss")
		return
	}
	c.violate(s, kindISRReadVanished, "%s: %s read by a consumer at offset %d is gone: %s", part, value, offset, why)
}

// leaderOf returns the broker the stored record names leader, if it runs
// and has taken up that leader epoch.
func (s *isrSim) leaderOf(part string) (*isrBroker, *isr.Replica) {
	rec := s.records[part]
	if rec == nil || rec.state.Leader == isr.NoLeader {
		return nil, nil
	}
	b := s.broker(rec.state.Leader)
	r := b.replicas[part]
	if !b.up || b.pausedTo > s.e.now || r == nil || r.Role() != isr.RoleLeader || r.LeaderEpoch() != rec.state.LeaderEpoch {
		return nil, nil
	}
	return b, r
}

// periodic runs (a), (b) and (c) against every partition's current leader.
func (c *isrChecker) periodic(s *isrSim) {
	c.recoverImpaired(s)
	for _, part := range s.parts {
		b, r := s.leaderOf(part)
		if b == nil {
			continue
		}
		c.checkAgainstLeader(s, part, b, r, false)
	}
}

func (c *isrChecker) checkAgainstLeader(s *isrSim, part string, b *isrBroker, r *isr.Replica, final bool) {
	l := b.logs[part]
	for _, a := range c.acked[part] {
		if a.lost {
			continue
		}
		got, _, ok := l.Record(a.offset)
		if ok && string(got) == a.value {
			continue
		}
		switch {
		case a.acks == isr.AcksAll && !c.permitted(s, part):
			a.lost = true
			c.violate(s, kindISRAckedLost, "%s: %s acknowledged with acks=all at offset %d is not in leader %d's log (epoch %d)", part, a.value, a.offset, b.id, r.LeaderEpoch())
		case a.acks == isr.AcksAll:
			a.lost = true
			s.stats.LostAcksAll++
			s.situation("permitted loss")
		case final || r.HighWatermark() > a.offset:
			// acks=1: lost once the leader's committed log passed it
			// without it (or at the end of the run).
			a.lost = true
			s.stats.LostAcks1++
			s.situation("acks=1 loss")
		}
	}
	for _, rd := range c.readOrder[part] {
		off := rd.offset
		if rd.lost {
			continue
		}
		got, _, ok := l.Record(off)
		if ok && string(got) == rd.value {
			continue
		}
		rd.lost = true
		c.readLost(s, part, off, rd.value, fmt.Sprintf("not in leader %d's log (epoch %d)", b.id, r.LeaderEpoch()))
	}
	// (b) followers of this leader epoch agree with the leader below their HW.
	if c.permitted(s, part) {
		return
	}
	for _, f := range s.brokers {
		fr := f.replicas[part]
		if f == b || !f.up || fr == nil || fr.Role() != isr.RoleFollower || fr.LeaderEpoch() != r.LeaderEpoch() {
			continue
		}
		hw := fr.HighWatermark()
		if n := f.logs[part].CommonPrefix(l, hw); n < hw {
			c.violate(s, kindISRNotPrefix, "%s: follower %d's log differs from leader %d's at offset %d, below its HW %d", part, f.id, b.id, n, hw)
		}
	}
}

// finalChecks runs at the end of a run, after every fault healed: the
// checks once more, and the liveness summary.
func (s *isrSim) finalChecks() string {
	liveness := ""
	s.chk.recoverImpaired(s)
	for _, part := range s.parts {
		b, r := s.leaderOf(part)
		if b == nil {
			rec := s.records[part]
			if rec != nil && !s.cfg.unclean && s.powerLossAmong(rec.state.Replicas) {
				// The durable choice: with unclean election off, replicas
				// that came back from losing their page cache are not
				// eligible (KIP-966), so the partition waits offline.
				s.situation("offline after power loss (unclean off)")
				continue
			}
			if liveness == "" && rec != nil {
				liveness = fmt.Sprintf("%s has no running leader at the end (record %v)", part, rec.state)
			}
			continue
		}
		s.chk.checkAgainstLeader(s, part, b, r, true)
	}
	return liveness
}
