package sim

import (
	"errors"
	"fmt"
	"time"

	"quire/internal/isr"
)

func errorsIs(err, target error) bool { return err != nil && errors.Is(err, target) }

// isrProducer sends records of one partition to the leader it knows, a few
// requests in flight, each with the seed's acks (or a random one when the
// acks are mixed). A request never answered is given up after a timeout;
// records are never sent twice, so every value is unique.
type isrProducer struct {
	name, part string
	leader     isr.BrokerID // 0: unknown
	refreshing bool
	next       int // next value number
	lastID     uint64
	inflight   map[uint64]*isrRequest
}

type isrRequest struct {
	acks   int8
	values []string
	sentAt time.Duration
}

// isrConsumer reads one partition from the leader it knows, below the HW.
type isrConsumer struct {
	name, part string
	leader     isr.BrokerID
	epoch      int32
	refreshing bool
	next       int64
	inflight   bool
	sentAt     time.Duration
	lastID     uint64
}

const (
	isrProducersStop = isrEndAt - 12*time.Second
	isrMaxInflight   = 3
)

func (s *isrSim) startClients(part string) {
	p := &isrProducer{name: "producer-" + part, part: part, inflight: map[uint64]*isrRequest{}}
	c := &isrConsumer{name: "consumer-" + part, part: part, epoch: isr.NoEpoch}
	s.producers[part], s.consumers[part] = p, c
	every := time.Duration(s.e.intn(10, 60)) * time.Millisecond
	var produce func()
	produce = func() {
		if s.e.now >= isrProducersStop {
			return
		}
		s.produceOnce(p)
		s.e.after(every, produce)
	}
	s.e.after(every, produce)
	var consume func()
	consume = func() {
		s.consumeOnce(c)
		s.e.after(300*time.Millisecond, consume)
	}
	s.e.after(300*time.Millisecond, consume)
}

// refresh asks the store for the partition's record (a metadata request).
func (s *isrSim) refresh(client, part string, refreshing *bool, set func(isr.PartitionState)) {
	if *refreshing {
		return
	}
	*refreshing = true
	s.quiet(client, isrMeta, func() {
		rec := s.records[part]
		var st isr.PartitionState
		if rec != nil {
			st = rec.state.Clone()
		}
		s.quiet(isrMeta, client, func() {
			set(st)
			if st.Leader != isr.NoLeader {
				s.e.tracef(client, "metadata: %s", st)
			}
		})
	})
	// One lookup at a time, and at most every 200 ms.
	s.e.after(200*time.Millisecond, func() { *refreshing = false })
}

func (s *isrSim) produceOnce(p *isrProducer) {
	for id, req := range p.inflight {
		if s.e.now-req.sentAt > isrProduceTimeout+2*time.Second {
			delete(p.inflight, id) // outcome unknown; never retried
			p.leader = 0
		}
	}
	if p.leader == 0 {
		s.refresh(p.name, p.part, &p.refreshing, func(st isr.PartitionState) {
			if st.Leader != isr.NoLeader {
				p.leader = st.Leader
			}
		})
		return
	}
	if len(p.inflight) >= isrMaxInflight {
		return
	}
	acks := s.cfg.acks
	if s.cfg.mixedAcks {
		acks = []int8{isr.AcksNone, isr.AcksLeader, isr.AcksAll}[s.e.intn(0, 2)]
	}
	p.lastID++
	req := isr.ProduceRequest{ID: p.lastID, Client: p.name, Partition: p.part, Acks: acks, Timeout: isrProduceTimeout}
	var values []string
	for range s.e.intn(1, 3) {
		p.next++
		v := fmt.Sprintf("%s-%d", p.part, p.next)
		values = append(values, v)
		req.Records = append(req.Records, []byte(v))
	}
	if acks != isr.AcksNone {
		p.inflight[req.ID] = &isrRequest{acks: acks, values: values, sentAt: s.e.now}
	} else {
		s.stats.SentNoAck += len(values)
	}
	to := brokerName(p.leader)
	s.send(p.name, to, fmt.Sprintf("produce#%d %s acks=%d n=%d", req.ID, p.part, acks, len(values)), func() {
		b := s.brokerByName(to)
		r := b.replicas[req.Partition]
		if r == nil {
			return
		}
		r.Produce(req, s.now())
		s.drainReplica(b, r)
	})
}

func (s *isrSim) onProduceResponse(resp isr.ProduceResponse) {
	p := s.producers[resp.Partition]
	req := p.inflight[resp.ID]
	if req == nil {
		return
	}
	delete(p.inflight, resp.ID)
	if resp.Err != nil {
		switch {
		case errorsIs(resp.Err, isr.ErrNotEnoughReplicas):
			s.situation("NOT_ENOUGH_REPLICAS")
		case errorsIs(resp.Err, isr.ErrNotEnoughReplicasAfterAppend):
			s.situation("NOT_ENOUGH_REPLICAS_AFTER_APPEND")
		case errorsIs(resp.Err, isr.ErrRequestTimedOut):
			s.situation("produce timed out")
		default:
			p.leader = 0
		}
		return
	}
	s.chk.acknowledged(s, resp, req)
}

func (s *isrSim) consumeOnce(c *isrConsumer) {
	if c.inflight && s.e.now-c.sentAt > 3*time.Second {
		c.inflight, c.leader = false, 0
	}
	if c.inflight {
		return
	}
	if c.leader == 0 {
		s.refresh(c.name, c.part, &c.refreshing, func(st isr.PartitionState) {
			if st.Leader != isr.NoLeader {
				c.leader, c.epoch = st.Leader, st.LeaderEpoch
			}
		})
		return
	}
	c.lastID++
	c.inflight, c.sentAt = true, s.e.now
	req := isr.FetchRequest{ID: c.lastID, Partition: c.part, ReplicaID: -1, Client: c.name, To: c.leader,
		CurrentLeaderEpoch: c.epoch, FetchOffset: c.next, LastFetchedEpoch: isr.NoEpoch}
	to := brokerName(c.leader)
	s.send(c.name, to, fmt.Sprintf("consume %s@%d", c.part, c.next), func() {
		b := s.brokerByName(to)
		r := b.replicas[req.Partition]
		if r == nil {
			return
		}
		r.Fetch(req, s.now())
		s.drainReplica(b, r)
	})
}

func (s *isrSim) onConsumerFetch(resp isr.FetchResponse) {
	c := s.consumers[resp.Partition]
	if resp.ID != c.lastID {
		return
	}
	c.inflight = false
	if resp.Err != nil {
		if errorsIs(resp.Err, isr.ErrOffsetOutOfRange) {
			s.situation("consumer offset out of range")
			c.next = min(c.next, resp.HighWatermark)
		}
		c.leader = 0
		return
	}
	for _, b := range resp.Batches {
		for i, v := range b.Records {
			off := b.BaseOffset + int64(i)
			s.chk.consumed(s, c.part, off, string(v))
			c.next = off + 1
		}
	}
}
