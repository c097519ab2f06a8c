package kafka

// ElectLeaders (key 43), versions 0–2.
//
// election_type 0 moves each partition's leadership to its preferred
// replica (the first of its replicas), 1 elects a leader for a partition
// that has none, out of sync if it must (v0: always preferred; any other
// type answers INVALID_REQUEST at the top level). Null topics mean every
// partition of every topic, and then, as Kafka's controller does, the
// partitions whose election was not needed are left out of the answer
// (each topic is still listed). Per partition, as Kafka: nothing, or
// ELECTION_NOT_NEEDED (the preferred replica already leads; for unclean,
// the partition has a leader), PREFERRED_LEADER_NOT_AVAILABLE (the
// preferred replica is not live or not in the ISR),
// ELIGIBLE_LEADERS_NOT_AVAILABLE (no live replica for an unclean
// election), UNKNOWN_TOPIC_OR_PARTITION (no such topic or partition),
// INVALID_TOPIC_EXCEPTION (a name Kafka would not allow), REQUEST_TIMED_OUT
// (the new leader did not show within timeout_ms, default 30 s for
// timeout_ms ≤ 0). Any broker serves it (the Backend reaches the
// controller wherever it runs).
//
// The elections are the Backend's (LeaderElector: ISR mode's controller).
// A Backend without one has a single replica per partition, which leads
// it: every election answers ELECTION_NOT_NEEDED. Ledger-mode topics are
// such: a partition's leader is the broker that owns its bundle, Metadata
// lists it as the only replica, and ownership (not an election) moves it;
// ELECTION_NOT_NEEDED, with a message that says so, is Kafka's answer for
// a partition whose only (preferred) replica leads.
//
// Deviations: a partition named twice is elected once and answered twice.

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// defaultElectionTimeout is the wait for new leaders of a request whose
// timeout_ms is not positive.
const defaultElectionTimeout = 30 * time.Second

type topicPartition struct {
	topic     string
	partition int32
}

func handleElectLeaders(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.ElectLeadersRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
		s.electLeaders(ctx, rq, req, resp)
		return resp
	}
}

func (s *Server) electLeaders(ctx context.Context, rq *request, req *kmsg.ElectLeadersRequest, resp *kmsg.ElectLeadersResponse) {
	electionType := req.ElectionType
	if req.Version == 0 {
		electionType = 0
	}
	all := req.Topics == nil
	fail := func(code int16) {
		resp.ErrorCode = rq.note(code)
		for _, t := range req.Topics {
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, electionAnswer(p, code, errorMessage(code)))
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	if electionType != 0 && electionType != 1 {
		fail(kerr.InvalidRequest.Code)
		return
	}
	var names []string
	if !all {
		seen := map[string]bool{}
		for _, t := range req.Topics {
			if validTopicName(t.Topic) && !seen[t.Topic] {
				seen[t.Topic] = true
				names = append(names, t.Topic)
			}
		}
	}
	var topics []TopicInfo
	if all || len(names) > 0 {
		var err error
		if topics, err = s.backend.Topics(ctx, names, false); err != nil {
			fail(s.errorCode(err, "elect leaders: topics"))
			return
		}
	}
	partitions := make(map[string]int, len(topics))
	for _, t := range topics {
		partitions[t.Name] = len(t.Partitions)
	}

	// What to elect, each partition once, in the order asked.
	type asked struct {
		topic string
		parts []int32
		codes []int16 // per partition: the front end's own answer, or 0
	}
	var want []asked
	if all {
		for _, t := range topics {
			a := asked{topic: t.Name}
			for _, p := range t.Partitions {
				a.parts, a.codes = append(a.parts, p.Partition), append(a.codes, 0)
			}
			want = append(want, a)
		}
	} else {
		for _, t := range req.Topics {
			a := asked{topic: t.Topic, parts: t.Partitions, codes: make([]int16, len(t.Partitions))}
			n, exists := partitions[t.Topic]
			for i, p := range t.Partitions {
				switch {
				case !validTopicName(t.Topic):
					a.codes[i] = kerr.InvalidTopicException.Code
				case !exists || p < 0 || int(p) >= n:
					a.codes[i] = kerr.UnknownTopicOrPartition.Code
				}
			}
			want = append(want, a)
		}
	}
	var elect []TopicPartitions
	queued := map[topicPartition]bool{}
	for _, a := range want {
		var tp *TopicPartitions
		for i, p := range a.parts {
			key := topicPartition{a.topic, p}
			if a.codes[i] != 0 || queued[key] {
				continue
			}
			queued[key] = true
			if tp == nil || tp.Topic != a.topic {
				elect = append(elect, TopicPartitions{Topic: a.topic})
				tp = &elect[len(elect)-1]
			}
			tp.Partitions = append(tp.Partitions, p)
		}
	}
	results := map[topicPartition]error{}
	if le, ok := s.backend.(LeaderElector); ok && len(elect) > 0 {
		timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
		if timeout <= 0 {
			timeout = defaultElectionTimeout
		}
		for _, r := range le.ElectLeaders(ctx, electionType, elect, timeout) {
			results[topicPartition{r.Topic, r.Partition}] = r.Err
		}
	} else {
		for _, tp := range elect {
			for _, p := range tp.Partitions {
				results[topicPartition{tp.Topic, p}] = errSingleReplica
			}
		}
	}

	for _, a := range want {
		rt := kmsg.NewElectLeadersResponseTopic()
		rt.Topic = a.topic
		for i, p := range a.parts {
			code, msg := a.codes[i], errorMessage(a.codes[i])
			if code == 0 {
				err, answered := results[topicPartition{a.topic, p}]
				if !answered {
					err = kerr.RequestTimedOut // a backend that left it out
				}
				if code = s.errorCode(err, "elect leaders", "topic", a.topic, "partition", p); code != 0 {
					msg = electionMessage(err, code)
				}
			}
			if all && code == kerr.ElectionNotNeeded.Code {
				continue
			}
			rt.Partitions = append(rt.Partitions, electionAnswer(p, rq.note(code), msg))
		}
		if rt.Partitions == nil {
			rt.Partitions = []kmsg.ElectLeadersResponseTopicPartition{}
		}
		resp.Topics = append(resp.Topics, rt)
	}
}

// errSingleReplica answers an election of a Backend without a
// LeaderElector: its partitions' only replica leads them.
var errSingleReplica = &wrappedKerr{kerr.ElectionNotNeeded, "the partition has one replica, which leads it"}

// wrappedKerr is a kerr code with a message of its own.
type wrappedKerr struct {
	code *kerr.Error
	msg  string
}

func (e *wrappedKerr) Error() string { return e.code.Message + ": " + e.msg }
func (e *wrappedKerr) Unwrap() error { return e.code }

func electionAnswer(partition int32, code int16, msg *string) kmsg.ElectLeadersResponseTopicPartition {
	rp := kmsg.NewElectLeadersResponseTopicPartition()
	rp.Partition, rp.ErrorCode, rp.ErrorMessage = partition, code, msg
	return rp
}

// electionMessage is what an election's error says: the Backend's own
// words when it gave more than the bare code.
func electionMessage(err error, code int16) *string {
	var ke *kerr.Error
	if errors.As(err, &ke) && err == error(ke) {
		return errorMessage(code)
	}
	msg := err.Error()
	return &msg
}

// validTopicName is Kafka's rule for topic names (Topic.validate): 1–249
// characters of [a-zA-Z0-9._-], not "." or "..".
func validTopicName(name string) bool {
	if name == "" || name == "." || name == ".." || len(name) > 249 {
		return false
	}
	for _, c := range []byte(name) {
		if !(c == '.' || c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
