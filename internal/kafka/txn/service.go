package txn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/loop"
	"quire/internal/meta"
)

// MarkerWriter ends a transaction in its participants: a control batch in
// each partition (through whichever broker serves it), each group's pending
// transactional offsets committed or dropped. It returns the participants
// it could not end; they are retried.
type MarkerWriter interface {
	WriteMarkers(ctx context.Context, op MarkerOp) MarkerResult
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	Store meta.Store
	// Prefix is where the records live, one key per transactional id
	// (default DefaultPrefix).
	Prefix string
	// ProducerIDSequence is the store sequence producer ids come from: the
	// one the idempotent producers' InitProducerID uses, so that the two
	// never hand out the same id (default "kafka-producer-id").
	ProducerIDSequence string
	Markers            MarkerWriter
	// Owns says whether this broker coordinates a transactional id (nil:
	// every id). The scan adopts only the open transactions of ids it owns.
	Owns func(transactionalID string) bool
	// Core is the coordinator's configuration (timeouts, retries).
	Core Config
	// Tick drives timeouts and retries (default 100 ms); ScanInterval is
	// how often the store is scanned for open transactions of owned ids
	// that this broker has not seen (a coordinator that died with them
	// open; default 5 s).
	Tick, ScanInterval time.Duration
	Logger             *slog.Logger
}

// DefaultPrefix is ServiceConfig.Prefix's default.
const DefaultPrefix = "/quire/kafka/txn/"

// Service is the transaction coordinator's shell on one broker: it drives
// a Coordinator on one goroutine (internal/loop), keeps its records in the
// metadata store (JSON, each write a compare-and-swap on the version the
// coordinator last saw), takes producer ids from the store's sequence, has
// the broker write markers (MarkerWriter) and answers the front end's
// requests when the core does. An id is read from the store before the
// first request for it (the store is the truth; the core holds a cache
// that a failed compare-and-swap drops), so any broker may coordinate any
// id at any time without a hand-over: ownership (Owns) only decides who
// scans for transactions a dead coordinator left open.
type Service struct {
	cfg  ServiceConfig
	log  *slog.Logger
	core *Coordinator
	loop *loop.Loop
	ctx  context.Context
	stop context.CancelFunc

	// Owned by the loop goroutine.
	waiters map[RequestID]chan Response
	nextReq RequestID
}

// NewService starts a Service; Close stops it.
func NewService(cfg ServiceConfig) *Service {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.ProducerIDSequence == "" {
		cfg.ProducerIDSequence = "kafka-producer-id"
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.ScanInterval <= 0 {
		cfg.ScanInterval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Service{cfg: cfg, log: cfg.Logger.With("component", "txn"), core: New(cfg.Core), ctx: ctx, stop: stop,
		waiters: map[RequestID]chan Response{}}
	s.loop = loop.New(loop.Config{
		Tick:   cfg.Tick,
		OnTick: func(now time.Time) { s.core.Tick(now) },
		Ready:  s.ready,
		Stopped: func() {
			for id, ch := range s.waiters {
				ch <- Response{ID: id, Err: kerr.NotCoordinator, ProducerID: -1, ProducerEpoch: -1}
				delete(s.waiters, id)
			}
		},
	})
	go s.loop.Run()
	_ = s.loop.Post(ctx, func() { s.core.Load(nil, time.Now()) })
	go s.scanLoop()
	return s
}

// Close stops the service; requests still waiting are answered
// NOT_COORDINATOR.
func (s *Service) Close() {
	s.stop()
	s.loop.Stop()
	<-s.loop.Done()
}

func (s *Service) key(id string) string { return s.cfg.Prefix + id }

// InitProducerID serves InitProducerId with a transactional id.
func (s *Service) InitProducerID(ctx context.Context, req InitProducerIDRequest) Response {
	return s.do(ctx, req.TransactionalID, func(id RequestID, now time.Time) { s.core.InitProducerID(id, req, now) })
}

// AddPartitions serves AddPartitionsToTxn.
func (s *Service) AddPartitions(ctx context.Context, req AddPartitionsRequest) Response {
	return s.do(ctx, req.TransactionalID, func(id RequestID, now time.Time) { s.core.AddPartitions(id, req, now) })
}

// AddOffsets serves AddOffsetsToTxn.
func (s *Service) AddOffsets(ctx context.Context, req AddOffsetsRequest) Response {
	return s.do(ctx, req.TransactionalID, func(id RequestID, now time.Time) { s.core.AddOffsets(id, req, now) })
}

// EndTxn serves EndTxn.
func (s *Service) EndTxn(ctx context.Context, req EndTxnRequest) Response {
	return s.do(ctx, req.TransactionalID, func(id RequestID, now time.Time) { s.core.EndTxn(id, req, now) })
}

// Describe returns an id's record as the store holds it (DescribeTransactions).
func (s *Service) Describe(ctx context.Context, txnID string) (Record, bool, error) {
	var rec Record
	_, err := meta.GetJSON(ctx, s.cfg.Store, s.key(txnID), &rec)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return Record{}, false, nil
	case err != nil:
		return Record{}, false, err
	}
	return rec, true, nil
}

// List returns every stored record (ListTransactions).
func (s *Service) List(ctx context.Context) ([]Record, error) {
	recs, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(recs))
	for _, lr := range recs {
		out = append(out, lr.Record)
	}
	return out, nil
}

// do reads the id's record if the core may not know it, then runs the
// request on the loop and waits for its answer.
func (s *Service) do(ctx context.Context, txnID string, call func(RequestID, time.Time)) Response {
	stored, err := s.read(ctx, txnID)
	if err != nil {
		return Response{Err: kerr.CoordinatorNotAvailable, ProducerID: -1, ProducerEpoch: -1}
	}
	ch := make(chan Response, 1)
	err = s.loop.Post(ctx, func() {
		now := time.Now()
		if !s.core.Known(txnID) && stored.Version != 0 {
			s.core.Adopt([]LoadedRecord{stored}, now)
		}
		s.nextReq++
		id := s.nextReq
		s.waiters[id] = ch
		call(id, now)
	})
	if err != nil {
		return Response{Err: kerr.NotCoordinator, ProducerID: -1, ProducerEpoch: -1}
	}
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		return Response{Err: kerr.RequestTimedOut, ProducerID: -1, ProducerEpoch: -1}
	}
}

// read returns an id's stored record (Version 0 when there is none).
func (s *Service) read(ctx context.Context, txnID string) (LoadedRecord, error) {
	var rec Record
	v, err := meta.GetJSON(ctx, s.cfg.Store, s.key(txnID), &rec)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return LoadedRecord{}, nil
	case err != nil:
		return LoadedRecord{}, err
	}
	return LoadedRecord{Record: rec, Version: Version(v)}, nil
}

// load reads every stored record.
func (s *Service) load(ctx context.Context) ([]LoadedRecord, error) {
	kvs, _, err := meta.ListAll(ctx, s.cfg.Store, s.cfg.Prefix)
	if err != nil {
		return nil, err
	}
	var out []LoadedRecord
	for _, kv := range kvs {
		var rec Record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			s.log.Warn("skipping an unreadable transaction record", "key", kv.Key, "err", err)
			continue
		}
		if rec.TransactionalID != strings.TrimPrefix(kv.Key, s.cfg.Prefix) {
			s.log.Warn("skipping a transaction record filed under another id", "key", kv.Key, "id", rec.TransactionalID)
			continue
		}
		out = append(out, LoadedRecord{Record: rec, Version: Version(kv.Version)})
	}
	return out, nil
}

// scanLoop adopts, every ScanInterval, the open and deciding transactions
// of owned ids: a coordinator that died left them, and their timeouts and
// markers must not wait for their producer to come back.
func (s *Service) scanLoop() {
	t := time.NewTicker(s.cfg.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		recs, err := s.load(s.ctx)
		if err != nil {
			if s.ctx.Err() == nil {
				s.log.Warn("scan of transaction records failed", "err", err)
			}
			continue
		}
		var open []LoadedRecord
		for _, lr := range recs {
			if st := lr.Record.State; (st == Ongoing || st.preparing()) && (s.cfg.Owns == nil || s.cfg.Owns(lr.Record.TransactionalID)) {
				open = append(open, lr)
			}
		}
		if len(open) > 0 {
			_ = s.loop.Post(s.ctx, func() { s.core.Adopt(open, time.Now()) })
		}
	}
}

// ready carries out what the core asked for (on the loop goroutine).
func (s *Service) ready() {
	rd := s.core.Ready()
	for _, r := range rd.Responses {
		if ch, ok := s.waiters[r.ID]; ok {
			ch <- r
			delete(s.waiters, r.ID)
		}
	}
	for _, op := range rd.MetaOps {
		go s.writeRecord(op)
	}
	for _, op := range rd.ProducerIDs {
		go func() {
			pid, err := s.cfg.Store.AllocateID(s.ctx, s.cfg.ProducerIDSequence)
			s.loop.Complete(func() { s.core.StepProducerID(ProducerIDResult{ID: op, ProducerID: pid, Err: err}, time.Now()) })
		}()
	}
	for _, op := range rd.Markers {
		go func() {
			res := s.cfg.Markers.WriteMarkers(s.ctx, op)
			res.ID = op.ID
			s.loop.Complete(func() { s.core.StepMarkers(res, time.Now()) })
		}()
	}
}

// writeRecord performs a MetaOp: create or compare-and-swap.
func (s *Service) writeRecord(op MetaOp) {
	value, err := json.Marshal(op.Record)
	if err != nil {
		panic(fmt.Sprintf("txn: encode record: %v", err)) // a Record always encodes
	}
	var v meta.Version
	if op.Expect == 0 {
		v, err = s.cfg.Store.Create(s.ctx, s.key(op.Record.TransactionalID), value)
	} else {
		v, err = s.cfg.Store.Put(s.ctx, s.key(op.Record.TransactionalID), value, meta.Version(op.Expect))
	}
	if errors.Is(err, meta.ErrExists) || errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrNotFound) {
		err = ErrVersionConflict
	}
	s.loop.Complete(func() { s.core.StepMeta(MetaResult{ID: op.ID, Version: Version(v), Err: err}, time.Now()) })
}
