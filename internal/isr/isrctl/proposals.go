package isrctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"quire/internal/isr"
	"quire/internal/meta"
)

// Proposals across processes. A broker's leaders propose ISR changes
// (Kafka's AlterPartition) and its front end asks for new partitions
// (CreateTopics), but only the active controller, in whichever process won
// the election, may act on them. They travel through the metadata store: a
// requester writes a proposal under ProposalPrefix (a fresh id from a store
// sequence), the active controller watches that prefix, hands each proposal
// to its core (which decides, as for an in-process call), writes the answer
// under AnswerPrefix with the same id, bound to its session, and deletes
// the proposal; the requester watches its answer key, reads it and deletes
// it. A controller elected meanwhile reads the proposals still there when
// its term starts: an AlterPartition carries the partition epoch it was
// based on, so one answered twice is rejected the second time, never
// applied twice. A proposal nobody answers within the caller's deadline
// fails with the deadline; the requester deletes it.
const (
	ProposalPrefix   = "/quire/isr/proposals/"
	AnswerPrefix     = "/quire/isr/answers/"
	proposalSequence = "isr-proposal"
)

// proposal is a request to the active controller, as stored.
type proposal struct {
	Alter    *isr.AlterPartitionRequest `json:"alter,omitempty"`
	Create   *createPartition           `json:"create,omitempty"`
	Delete   string                     `json:"delete,omitempty"` // a partition name
	Elect    *electLeader               `json:"elect,omitempty"`
	Reassign *isr.ReassignRequest       `json:"reassign,omitempty"`
}

type electLeader struct {
	Name string           `json:"name"`
	Kind isr.ElectionKind `json:"kind"`
}

type createPartition struct {
	Name     string              `json:"name"`
	Replicas []isr.BrokerID      `json:"replicas"`
	Config   isr.PartitionConfig `json:"config,omitzero"`
}

// answer is the controller's answer, as stored: the AlterPartition
// response's record and epoch, and the error by name (errorName).
type answer struct {
	State           isr.PartitionState `json:"state"`
	ControllerEpoch int64              `json:"controllerEpoch"`
	Err             string             `json:"err,omitempty"`
}

// protocolErrors are the outcomes an answer names and the requester gets
// back as themselves (errors.Is works across processes).
var protocolErrors = []error{isr.ErrNotController, isr.ErrInvalidUpdateVersion, isr.ErrIneligibleReplica,
	isr.ErrUnknownPartition, isr.ErrInvalidRequest, isr.ErrStaleBrokerEpoch, isr.ErrFencedLeaderEpoch,
	isr.ErrNotLeaderOrFollower, isr.ErrVersionConflict, isr.ErrNotEnoughReplicas, isr.ErrRequestTimedOut,
	isr.ErrElectionNotNeeded, isr.ErrPreferredLeaderNotAvailable, isr.ErrEligibleLeadersNotAvailable,
	isr.ErrInvalidReplicaAssignment, isr.ErrNoReassignmentInProgress, isr.ErrInvalidReplicationFactor}

func errorName(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func errorFromName(name string) error {
	if name == "" {
		return nil
	}
	for _, e := range protocolErrors {
		if name == e.Error() || strings.HasSuffix(name, ": "+e.Error()) {
			return fmt.Errorf("%s: %w", strings.TrimSuffix(strings.TrimSuffix(name, e.Error()), ": "), e)
		}
	}
	// The outcome named inside the text, with its details after it
	// ("reassign p (…): isr: INVALID_REPLICA_ASSIGNMENT: broker 9 is not
	// registered").
	for _, e := range protocolErrors {
		if strings.Contains(name, e.Error()+": ") {
			return namedError{msg: name, err: e}
		}
	}
	return errors.New(name)
}

// namedError is an answer's error text that names a protocol outcome.
type namedError struct {
	msg string
	err error
}

func (e namedError) Error() string { return e.msg }
func (e namedError) Unwrap() error { return e.err }

// Client sends proposals to the active controller wherever it runs. It
// implements isrnode.Controller.
type Client struct {
	Store meta.Store
}

// AlterPartition proposes a new ISR and waits for the controller's answer.
func (c Client) AlterPartition(ctx context.Context, req isr.AlterPartitionRequest) (isr.AlterPartitionResponse, error) {
	a, err := c.call(ctx, proposal{Alter: &req})
	if err != nil {
		return isr.AlterPartitionResponse{}, err
	}
	resp := isr.AlterPartitionResponse{ID: req.ID, Partition: req.Partition, To: req.Broker,
		ControllerEpoch: a.ControllerEpoch, Err: errorFromName(a.Err), State: a.State}
	return resp, resp.Err
}

// CreatePartition asks for a new partition's first record (replicas[0]
// the preferred leader; cfg the topic's own settings) and returns once the controller asked for the
// write; the record shows under isr.PartitionKey once written.
func (c Client) CreatePartition(ctx context.Context, name string, replicas []isr.BrokerID, cfg isr.PartitionConfig) error {
	a, err := c.call(ctx, proposal{Create: &createPartition{Name: name, Replicas: replicas, Config: cfg}})
	if err != nil {
		return err
	}
	return errorFromName(a.Err)
}

// DeletePartition asks for a partition's record to be deleted (its topic
// was deleted) and returns once the controller asked for the delete.
func (c Client) DeletePartition(ctx context.Context, name string) error {
	a, err := c.call(ctx, proposal{Delete: name})
	if err != nil {
		return err
	}
	return errorFromName(a.Err)
}

// Elect asks for an election (Kafka's ElectLeaders: preferred or
// unclean) and returns once the controller asked for the write, or its
// refusal (isr.ErrElectionNotNeeded, isr.ErrPreferredLeaderNotAvailable,
// isr.ErrEligibleLeadersNotAvailable, isr.ErrUnknownPartition); the new
// leader shows under isr.PartitionKey once written.
func (c Client) Elect(ctx context.Context, name string, kind isr.ElectionKind) error {
	a, err := c.call(ctx, proposal{Elect: &electLeader{Name: name, Kind: kind}})
	if err != nil {
		return err
	}
	return errorFromName(a.Err)
}

// Reassign asks for a partition's reassignment to start, be replaced or
// (a nil Target) be cancelled, and returns once the controller asked for
// the write, or its refusal (isr.ErrInvalidReplicaAssignment,
// isr.ErrNoReassignmentInProgress, isr.ErrInvalidReplicationFactor,
// isr.ErrUnknownPartition); the record under isr.PartitionKey shows it
// once written.
func (c Client) Reassign(ctx context.Context, req isr.ReassignRequest) error {
	a, err := c.call(ctx, proposal{Reassign: &req})
	if err != nil {
		return err
	}
	return errorFromName(a.Err)
}

func (c Client) call(ctx context.Context, p proposal) (answer, error) {
	id, err := c.Store.AllocateID(ctx, proposalSequence)
	if err != nil {
		return answer{}, fmt.Errorf("isr proposal: allocate an id: %w", err)
	}
	key, answerKey := fmt.Sprintf("%s%d", ProposalPrefix, id), fmt.Sprintf("%s%d", AnswerPrefix, id)
	value, err := json.Marshal(p)
	if err != nil {
		return answer{}, err
	}
	v, err := c.Store.Create(ctx, key, value)
	if err != nil {
		return answer{}, fmt.Errorf("isr proposal %d: %w", id, err)
	}
	defer func() {
		// Unanswered (the deadline): withdraw it. Answered: the
		// controller deleted it already.
		if kv, err := c.Store.Get(context.WithoutCancel(ctx), key); err == nil {
			_ = c.Store.Delete(context.WithoutCancel(ctx), key, kv.Version)
		}
	}()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range c.Store.Watch(wctx, answerKey, int64(v)+1) {
		if resp.Err != nil {
			break
		}
		for _, ev := range resp.Events {
			if ev.Type != meta.EventPut || ev.Key != answerKey {
				continue
			}
			var a answer
			if err := json.Unmarshal(ev.Value, &a); err != nil {
				return answer{}, fmt.Errorf("isr proposal %d: undecodable answer: %w", id, err)
			}
			_ = c.Store.Delete(context.WithoutCancel(ctx), answerKey, meta.Version(ev.Revision))
			return a, nil
		}
	}
	if ctx.Err() != nil {
		return answer{}, fmt.Errorf("isr proposal %d: no answer: %w", id, ctx.Err())
	}
	return answer{}, fmt.Errorf("isr proposal %d: the answer's watch ended: %w", id, meta.ErrUnavailable)
}

// serveProposals answers the proposals in the store while this term lasts
// (ctx ends with it): those already there, then each one as it comes.
func (s *Service) serveProposals(ctx context.Context, sess meta.Session, epoch int64) {
	var wg sync.WaitGroup
	defer wg.Wait()
	handle := func(key string, value []byte, v meta.Version) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.answerProposal(ctx, sess, epoch, key, value, v)
		}()
	}
	for ctx.Err() == nil {
		kvs, rev, err := meta.ListAll(ctx, s.cfg.Store, ProposalPrefix)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(s.cfg.Tick):
			}
			continue
		}
		for _, kv := range kvs {
			handle(kv.Key, kv.Value, kv.Version)
		}
		for resp := range s.cfg.Store.Watch(ctx, ProposalPrefix, rev+1) {
			if resp.Err != nil {
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == meta.EventPut {
					handle(ev.Key, ev.Value, meta.Version(ev.Revision))
				}
			}
		}
	}
}

// answerProposal hands one proposal to the core and stores the answer.
func (s *Service) answerProposal(ctx context.Context, sess meta.Session, epoch int64, key string, value []byte, v meta.Version) {
	id := strings.TrimPrefix(key, ProposalPrefix)
	var p proposal
	a := answer{ControllerEpoch: epoch}
	switch err := json.Unmarshal(value, &p); {
	case err != nil:
		a.Err = fmt.Sprintf("undecodable proposal: %v: %s", err, isr.ErrInvalidRequest)
	case p.Alter != nil:
		resp, err := s.AlterPartition(ctx, *p.Alter)
		if ctx.Err() != nil {
			return // the term ended: the next controller answers it
		}
		if err == nil {
			err = resp.Err
		}
		a.State, a.Err = resp.State, errorName(err)
		if resp.ControllerEpoch != 0 {
			a.ControllerEpoch = resp.ControllerEpoch
		}
	case p.Create != nil:
		err := s.CreatePartitionWith(ctx, p.Create.Name, p.Create.Replicas, p.Create.Config)
		if ctx.Err() != nil {
			return
		}
		a.Err = errorName(err)
	case p.Delete != "":
		err := s.DeletePartition(ctx, p.Delete)
		if ctx.Err() != nil {
			return
		}
		a.Err = errorName(err)
	case p.Elect != nil:
		err := s.Elect(ctx, p.Elect.Name, p.Elect.Kind)
		if ctx.Err() != nil {
			return
		}
		a.Err = errorName(err)
	case p.Reassign != nil:
		err := s.Reassign(ctx, *p.Reassign)
		if ctx.Err() != nil {
			return
		}
		a.Err = errorName(err)
	default:
		a.Err = "empty proposal: " + isr.ErrInvalidRequest.Error()
	}
	value, _ = json.Marshal(a)
	if _, err := sess.CreateEphemeral(ctx, AnswerPrefix+id, value); err != nil && !errors.Is(err, meta.ErrExists) {
		s.log.Warn("isr controller: answer a proposal", "proposal", id, "err", err)
		return
	}
	_ = s.cfg.Store.Delete(ctx, key, v)
}
