package pulsar

// Topic termination (Pulsar's `pulsar-admin topics terminate`): a
// terminated topic takes no more messages, ever, and its consumers are told
// when they have everything.
//
// TerminateTopic marks the topic's front-end state terminated (a PRODUCER
// is refused from then on with TopicTerminatedError), closes its producers
// (CLOSE_PRODUCER: the clients reconnect, are refused, and fail what they
// still hold with their "topic terminated" error), then has the Backend
// terminate the topic's storage (Terminator.Terminate: no append is taken
// after it, and the flag is durable, so the next owner refuses too) and
// answers the last message id. Producers are closed before the storage
// refuses, so a client's sends in flight are retried on reconnect and fail
// there with TopicTerminatedError, rather than answered with a SEND_ERROR
// (which pulsar-client-go takes as the end of its producer while its
// pending messages wait for their send timeout). A SEND that raced with
// the close still gets SEND_ERROR TopicTerminatedError, as from Pulsar.
//
// REACHED_END_OF_TOPIC: each round of a subscription's dispatcher on a
// terminated topic checks whether the subscription has acknowledged
// everything (its mark-delete position at the topic's last entry) and then
// tells each consumer once, as Pulsar does (its dispatchers notify when a
// read finds the ledger terminated and the backlog empty). Acknowledgements,
// a new consumer and the termination itself wake the dispatcher.
//
// Deviation: pulsar-client-go (through v0.21.0, the version Quire tests
// with) has no handler for REACHED_END_OF_TOPIC and closes its connection
// on any command it does not know, so a client whose CONNECT names it
// ("Pulsar-Go-…") is not sent it; the Java, C++ and Python clients are.
//
// Deviation: a partitioned topic is terminated partition by partition
// (Pulsar's admin refuses the partitioned name too and offers
// terminate/partitions).

import (
	"context"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

// Terminator is what a Topic implements when it can be terminated.
type Terminator interface {
	// Terminated reports whether the topic is terminated (durably: also
	// after a takeover or restart).
	Terminated() bool
	// Terminate refuses every Append from now on (ErrTopicTerminated),
	// waits for the appends in flight to end, records the termination
	// durably and returns the last entry's id (Earliest when there is
	// none). Terminating a terminated topic returns the same id.
	Terminate(ctx context.Context) (MessageID, error)
}

// terminated reports whether the topic takes no more producers.
func (ts *topicState) terminated() bool {
	ts.mu.Lock()
	marked := ts.terminating
	ts.mu.Unlock()
	if marked {
		return true
	}
	term, ok := ts.topic.(Terminator)
	return ok && term.Terminated()
}

// TerminateTopic terminates a topic this broker serves and returns its last
// message id: ErrNotAllowed when the Backend's topic cannot be terminated.
func (s *Server) TerminateTopic(ctx context.Context, name string) (MessageID, error) {
	ts, err := s.topicState(ctx, name, false)
	if err != nil {
		return MessageID{}, err
	}
	term, ok := ts.topic.(Terminator)
	if !ok {
		return MessageID{}, errorf(ErrNotAllowed, "topic %s cannot be terminated", name)
	}
	ts.mu.Lock()
	ts.terminating = true
	producers := make([]*producer, 0, len(ts.producers))
	for _, p := range ts.producers {
		producers = append(producers, p)
	}
	waiting := ts.waiting
	ts.waiting = nil
	ts.mu.Unlock()
	for _, p := range producers {
		ts.removeProducer(p)
		if p.conn.detachProducer(p) {
			_ = p.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{
				ProducerId: proto.Uint64(p.id),
				RequestId:  proto.Uint64(0),
			}}) // a closed connection has nobody to tell
		}
	}
	for _, w := range waiting {
		w.p.conn.mu.Lock()
		mine := w.p.conn.waiting[w.p.id] == w.p
		delete(w.p.conn.waiting, w.p.id)
		w.p.conn.mu.Unlock()
		if mine {
			_ = w.p.conn.sendError(w.reqID, errorf(ErrTopicTerminated, "topic %s was terminated", name), "")
		}
	}
	last, err := term.Terminate(ctx)
	if err != nil {
		if !term.Terminated() {
			ts.mu.Lock()
			ts.terminating = false
			ts.mu.Unlock()
		}
		return MessageID{}, err
	}
	s.log.Info("topic terminated", "topic", name, "last", last, "producers closed", len(producers))
	ts.mu.Lock()
	subs := make([]*subscription, 0, len(ts.subs))
	for _, sub := range ts.subs {
		subs = append(subs, sub)
	}
	ts.mu.Unlock()
	for _, sub := range subs {
		sub.signal()
	}
	return last, nil
}

// notifyEndOfTopic tells the consumers of a subscription that has
// acknowledged everything on a terminated topic (REACHED_END_OF_TOPIC),
// each once. The dispatcher calls it every round.
func (sub *subscription) notifyEndOfTopic() {
	if !sub.ts.terminated() {
		return
	}
	term, ok := sub.ts.topic.(Terminator)
	if !ok || !term.Terminated() {
		return // the storage is not terminated yet: more may be written
	}
	if sub.cursor.MarkDelete().Less(sub.ts.topic.LastMessageID()) {
		return
	}
	sub.mu.Lock()
	var tell []*consumer
	for _, c := range sub.consumers {
		if !c.toldEnd {
			c.toldEnd = true
			if understandsEndOfTopic(c.conn.clientVersion) {
				tell = append(tell, c)
			}
		}
	}
	sub.mu.Unlock()
	for _, c := range tell {
		_ = c.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_REACHED_END_OF_TOPIC.Enum(),
			ReachedEndOfTopic: &pb.CommandReachedEndOfTopic{ConsumerId: proto.Uint64(c.id)}})
	}
}

// understandsEndOfTopic reports whether a client (by its CONNECT
// client_version) handles REACHED_END_OF_TOPIC: see the header.
func understandsEndOfTopic(clientVersion string) bool {
	return !strings.HasPrefix(clientVersion, "Pulsar-Go-")
}
