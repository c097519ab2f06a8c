// Package isrctl runs ISR mode's controller (the isr.Controller core) on the
// metadata store: one active controller at a time, elected through an
// ephemeral key, each term under a new epoch from an id sequence; broker
// liveness from the brokers' ephemeral registrations (a broker's epoch is
// its registration's version); partition records written only by CAS.
//
// A term: win the election (create isr.ControllerKey with a new epoch
// under this process's session); read every partition record and live
// registration at one revision and Load them into a new core, which writes
// every record of an older controller again under its epoch (so a deposed
// controller's next CAS fails); watch the registrations from that revision
// (a put registers a broker, a delete ends its session); carry out what the
// core asks (MetaOps as CAS on the store, record pushes, answers to
// leaders' AlterPartition proposals). The term ends when the session does,
// when the core sees a newer controller's record (deposed), or on Close;
// the process then campaigns again.
//
// The shell decides nothing: elections, ISR changes and fencing are the
// core's, the same code the simulator runs (quire sim isr).
package isrctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"quire/internal/isr"
	"quire/internal/loop"
	"quire/internal/meta"
)

// ErrNotController: this process is not the active controller (or its term
// ended while the call waited).
var ErrNotController = isr.ErrNotController

// Config configures a Service.
type Config struct {
	Store meta.Store
	// Name identifies this process in the controller key.
	Name string
	// SessionTTL bounds how long a dead controller keeps the role (default
	// 10 s).
	SessionTTL time.Duration
	// Tick drives the core's timers (default 100 ms).
	Tick time.Duration
	// Controller configures every term's core; its Epoch is set at each
	// election.
	Controller isr.ControllerConfig
	// Pushes, when set, receives every record the controller wrote, for the
	// replicas it names (Kafka's metadata propagation); brokers may watch
	// isr.PartitionPrefix instead. Called on the controller's goroutine: it
	// must not block.
	Pushes func(isr.StatePush)
	Logger *slog.Logger
}

// Service campaigns for the controller role and runs the core while it
// holds it.
type Service struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	term *term // nil while not the active controller
}

// term is one period as the active controller.
type term struct {
	s       *Service
	epoch   int64
	core    *isr.Controller
	loop    *loop.Loop
	regs    map[isr.BrokerID]int64 // live registrations: broker epoch
	waiters map[uint64]chan isr.AlterPartitionResponse
	nextReq uint64
	ended   chan struct{} // closed when the term must end (deposed)
	endOnce sync.Once
}

// Start begins campaigning in the background.
func Start(cfg Config) *Service {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 10 * time.Second
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{cfg: cfg, log: cfg.Logger.With("component", "isr-controller", "name", cfg.Name),
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go s.run()
	return s
}

// Close resigns (if active) and stops campaigning.
func (s *Service) Close() {
	s.cancel()
	<-s.done
}

// Active reports whether this process is the active controller, and its
// epoch.
func (s *Service) Active() (bool, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term == nil {
		return false, 0
	}
	return true, s.term.epoch
}

func (s *Service) run() {
	defer close(s.done)
	for s.ctx.Err() == nil {
		if err := s.campaign(); err != nil && s.ctx.Err() == nil {
			s.log.Warn("isr controller: campaign", "err", err)
			select {
			case <-s.ctx.Done():
			case <-time.After(s.cfg.SessionTTL / 4):
			}
		}
	}
}

// campaign waits to win the election under a new session, then serves one
// term; it returns when the term ends.
func (s *Service) campaign() error {
	sess, err := s.cfg.Store.NewSession(s.ctx, s.cfg.SessionTTL)
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	defer sess.Close()
	for {
		epoch, err := s.cfg.Store.AllocateID(s.ctx, isr.ControllerEpochSequence)
		if err != nil {
			return fmt.Errorf("allocate an epoch: %w", err)
		}
		rec, _ := json.Marshal(isr.ControllerRecord{ID: s.cfg.Name, Epoch: epoch})
		_, err = sess.CreateEphemeral(s.ctx, isr.ControllerKey, rec)
		if err == nil {
			return s.serve(sess, epoch)
		}
		if !errors.Is(err, meta.ErrExists) {
			return fmt.Errorf("claim the controller key: %w", err)
		}
		if err := s.awaitVacancy(sess); err != nil {
			return err
		}
	}
}

// awaitVacancy returns once the controller key is gone (or may be).
func (s *Service) awaitVacancy(sess meta.Session) error {
	res, err := s.cfg.Store.List(s.ctx, isr.ControllerKey, meta.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	if len(res.KVs) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	w := s.cfg.Store.Watch(ctx, isr.ControllerKey, res.Revision+1)
	for {
		select {
		case <-sess.Done():
			return fmt.Errorf("session ended while waiting: %w", sess.Err())
		case <-s.ctx.Done():
			return s.ctx.Err()
		case r, ok := <-w:
			if !ok || r.Err != nil {
				return nil // look again
			}
			for _, ev := range r.Events {
				if ev.Key == isr.ControllerKey && ev.Type == meta.EventDelete {
					return nil
				}
			}
		}
	}
}

// serve runs one term as the active controller.
func (s *Service) serve(sess meta.Session, epoch int64) error {
	parts, rev, err := meta.ListAll(s.ctx, s.cfg.Store, isr.PartitionPrefix)
	if err != nil {
		return fmt.Errorf("read partition records: %w", err)
	}
	regKVs, regRev, err := meta.ListAll(s.ctx, s.cfg.Store, isr.BrokerPrefix)
	if err != nil {
		return fmt.Errorf("read registrations: %w", err)
	}
	rev = max(rev, regRev)
	cfg := s.cfg.Controller
	cfg.Epoch = epoch
	t := &term{s: s, epoch: epoch, core: isr.NewController(cfg, time.Now()), regs: map[isr.BrokerID]int64{},
		waiters: map[uint64]chan isr.AlterPartitionResponse{}, ended: make(chan struct{})}
	var stored []isr.StoredPartition
	for _, kv := range parts {
		st, err := isr.UnmarshalState(kv.Value)
		if err != nil {
			s.log.Warn("isr controller: skipping an undecodable partition record", "key", kv.Key, "err", err)
			continue
		}
		stored = append(stored, isr.StoredPartition{State: st, Version: int64(kv.Version)})
	}
	var regs []isr.Registration
	for _, kv := range regKVs {
		reg, err := isr.UnmarshalRegistration(kv.Value, int64(kv.Version))
		if err != nil {
			continue
		}
		regs = append(regs, reg)
		t.regs[reg.ID] = reg.Epoch
	}
	t.loop = loop.New(loop.Config{Tick: s.cfg.Tick, OnTick: func(now time.Time) { t.core.Tick(now) }, Ready: t.process,
		Stopped: t.failWaiters})
	t.core.Load(stored, regs, time.Now())
	go t.loop.Run()
	s.mu.Lock()
	s.term = t
	s.mu.Unlock()
	s.log.Info("isr controller: elected", "epoch", epoch, "partitions", len(stored), "brokers", len(regs))

	wctx, cancel := context.WithCancel(s.ctx)
	proposalsDone := make(chan struct{})
	go func() {
		defer close(proposalsDone)
		s.serveProposals(wctx, sess, epoch)
	}()
	defer func() { cancel(); <-proposalsDone }()
	watch := s.cfg.Store.Watch(wctx, isr.BrokerPrefix, rev+1)
	var why error
	for why == nil {
		select {
		case <-s.ctx.Done():
			why = s.ctx.Err()
		case <-sess.Done():
			why = fmt.Errorf("session ended: %w", sess.Err())
		case <-t.ended:
			why = errors.New("deposed by a newer controller")
		case r, ok := <-watch:
			if !ok || r.Err != nil {
				why = fmt.Errorf("registration watch ended: %v", r.Err)
				break
			}
			events := r.Events
			if err := t.loop.Post(s.ctx, func() { t.registrations(events) }); err != nil {
				why = err
			}
		}
	}
	s.mu.Lock()
	s.term = nil
	s.mu.Unlock()
	t.loop.Stop()
	<-t.loop.Done()
	s.log.Info("isr controller: term ended", "epoch", epoch, "why", why)
	if s.ctx.Err() != nil {
		return nil
	}
	return why
}

// registrations feeds registration changes to the core (loop goroutine).
func (t *term) registrations(events []meta.Event) {
	now := time.Now()
	for _, ev := range events {
		id, err := strconv.ParseInt(strings.TrimPrefix(ev.Key, isr.BrokerPrefix), 10, 32)
		if err != nil {
			continue
		}
		bid := isr.BrokerID(id)
		switch ev.Type {
		case meta.EventPut:
			reg, err := isr.UnmarshalRegistration(ev.Value, ev.Revision)
			if err != nil {
				continue
			}
			t.regs[bid] = reg.Epoch
			t.core.Register(reg, now)
		case meta.EventDelete:
			if epoch, ok := t.regs[bid]; ok {
				delete(t.regs, bid)
				t.core.SessionExpired(bid, epoch, now)
			}
		}
	}
}

// process carries out the core's Ready (loop goroutine).
func (t *term) process() {
	for rd := t.core.Ready(); !rd.Empty(); rd = t.core.Ready() {
		for _, op := range rd.MetaOps {
			go func() {
				res := t.exec(op)
				t.loop.Complete(func() { t.core.StepMeta(res, time.Now()) })
			}()
		}
		for _, p := range rd.Pushes {
			if t.s.cfg.Pushes != nil {
				t.s.cfg.Pushes(p)
			}
		}
		for _, r := range rd.AlterPartitionResponses {
			if ch, ok := t.waiters[r.ID]; ok {
				delete(t.waiters, r.ID)
				ch <- r
			}
		}
		for _, ev := range rd.Events {
			t.s.log.Info("isr controller: " + ev.String())
		}
	}
	if t.core.Deposed() {
		t.endOnce.Do(func() { close(t.ended) })
	}
}

// exec performs one MetaOp on the store: a compare-and-swap failure is
// isr.ErrVersionConflict, anything else (the store unreachable) is retried
// by the core.
func (t *term) exec(op isr.MetaOp) isr.MetaResult {
	ctx, cancel := context.WithTimeout(t.s.ctx, 10*time.Second)
	defer cancel()
	res := isr.MetaResult{ID: op.ID}
	store, key := t.s.cfg.Store, op.Key()
	var v meta.Version
	var err error
	switch op.Kind {
	case isr.MetaRead:
		var kv meta.KV
		if kv, err = store.Get(ctx, key); err == nil {
			v = kv.Version
			res.State, err = isr.UnmarshalState(kv.Value)
		}
	case isr.MetaCreate:
		v, err = store.Create(ctx, key, op.State.Marshal())
	case isr.MetaWrite:
		expected := meta.Version(op.Expected)
		if op.Expected == isr.AnyVersion { // a mutant's unconditional write
			var kv meta.KV
			if kv, err = store.Get(ctx, key); err == nil {
				expected = kv.Version
			}
		}
		if err == nil {
			v, err = store.Put(ctx, key, op.State.Marshal(), expected)
		}
	case isr.MetaDelete:
		err = store.Delete(ctx, key, meta.Version(op.Expected))
	}
	switch {
	case errors.Is(err, meta.ErrBadVersion), errors.Is(err, meta.ErrExists), errors.Is(err, meta.ErrNotFound):
		res.Err = isr.ErrVersionConflict
	case err != nil:
		res.Err = err
	default:
		res.Version = int64(v)
	}
	return res
}

// failWaiters answers the proposals still waiting when the term ends.
func (t *term) failWaiters() {
	for id, ch := range t.waiters {
		delete(t.waiters, id)
		ch <- isr.AlterPartitionResponse{ID: id, Err: ErrNotController}
	}
}

// call runs f on the active term's loop and waits for it.
func (s *Service) call(ctx context.Context, f func(t *term)) error {
	s.mu.Lock()
	t := s.term
	s.mu.Unlock()
	if t == nil {
		return ErrNotController
	}
	ran := make(chan struct{})
	if err := t.loop.Post(ctx, func() { f(t); close(ran) }); err != nil {
		if errors.Is(err, loop.ErrStopped) {
			return ErrNotController
		}
		return err
	}
	select {
	case <-ran:
		return nil
	case <-t.loop.Done():
		select {
		case <-ran:
			return nil
		default:
			return ErrNotController
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CreatePartition writes a new partition's first record (every live
// replica in the ISR, the first the leader). It returns once the write is
// asked for; Partition shows it once written.
func (s *Service) CreatePartition(ctx context.Context, name string, replicas []isr.BrokerID) error {
	return s.CreatePartitionWith(ctx, name, replicas, isr.PartitionConfig{})
}

// CreatePartitionWith is CreatePartition with the topic's own settings.
func (s *Service) CreatePartitionWith(ctx context.Context, name string, replicas []isr.BrokerID, cfg isr.PartitionConfig) error {
	var err error
	if cerr := s.call(ctx, func(t *term) { err = t.core.CreatePartitionWith(name, replicas, cfg, time.Now()) }); cerr != nil {
		return cerr
	}
	return err
}

// Partition returns the active controller's committed record of a partition.
func (s *Service) Partition(ctx context.Context, name string) (isr.PartitionState, bool, error) {
	var st isr.PartitionState
	var ok bool
	err := s.call(ctx, func(t *term) { st, ok = t.core.Partition(name) })
	return st, ok, err
}

// DeletePartition deletes a partition's record (its topic was deleted).
// It returns once the delete is asked for.
func (s *Service) DeletePartition(ctx context.Context, name string) error {
	var err error
	if cerr := s.call(ctx, func(t *term) { err = t.core.DeletePartition(name, time.Now()) }); cerr != nil {
		return cerr
	}
	return err
}

// ElectPreferred moves a partition's leadership to its preferred replica.
func (s *Service) ElectPreferred(ctx context.Context, name string) error {
	var err error
	if cerr := s.call(ctx, func(t *term) { err = t.core.ElectPreferred(name, time.Now()) }); cerr != nil {
		return cerr
	}
	return err
}

// Elect runs an election asked for (Kafka's ElectLeaders; see
// isr.Controller.Elect): it returns once the write is asked for, or the
// core's refusal.
func (s *Service) Elect(ctx context.Context, name string, kind isr.ElectionKind) error {
	var err error
	if cerr := s.call(ctx, func(t *term) { err = t.core.Elect(name, kind, time.Now()) }); cerr != nil {
		return cerr
	}
	return err
}

// Reassign starts, replaces or cancels a partition's reassignment (Kafka's
// AlterPartitionReassignments; see isr.Controller.Reassign): it returns
// once the write is asked for, or the core's refusal. The record shows the
// reassignment once written, and its completion later.
func (s *Service) Reassign(ctx context.Context, req isr.ReassignRequest) error {
	var err error
	if cerr := s.call(ctx, func(t *term) { err = t.core.Reassign(req, time.Now()) }); cerr != nil {
		return cerr
	}
	return err
}

// AlterPartition submits a leader's ISR proposal and waits for the answer.
func (s *Service) AlterPartition(ctx context.Context, req isr.AlterPartitionRequest) (isr.AlterPartitionResponse, error) {
	ch := make(chan isr.AlterPartitionResponse, 1)
	if err := s.call(ctx, func(t *term) {
		t.nextReq++
		req.ID = t.nextReq
		t.waiters[req.ID] = ch
		t.core.AlterPartition(req, time.Now())
	}); err != nil {
		return isr.AlterPartitionResponse{}, err
	}
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		return isr.AlterPartitionResponse{}, ctx.Err()
	}
}
