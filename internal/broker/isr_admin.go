package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/isr"
	"quire/internal/isr/isrctl"
	"quire/internal/isr/isrnode"
	"quire/internal/kafka"
	"quire/internal/meta"
)

// The Kafka admin APIs of ISR mode: ElectLeaders through the controller,
// DescribeLogDirs of this broker's ISR data directory.

var (
	_ kafka.LeaderElector   = (*Broker)(nil)
	_ kafka.LogDirDescriber = (*Broker)(nil)
)

// errLedgerElection answers an election of a ledger-mode partition: its
// leader is the owner of its bundle, its only replica as Metadata shows
// it, and ownership moves it (on failover, or `quire admin` unloading the
// bundle), never an election. ELECTION_NOT_NEEDED is Kafka's answer for a
// partition whose only (preferred) replica leads it.
var errLedgerElection = fmt.Errorf("%w: a ledger-mode partition is led by the broker that owns its bundle; ownership moves it, not an election", kerr.ElectionNotNeeded)

// electionPoll is how often ElectLeaders looks for the new leaders in the
// partition records.
const electionPoll = 20 * time.Millisecond

// ElectLeaders implements kafka.LeaderElector: each ISR partition's
// election goes to the active controller wherever it runs (an isrctl
// proposal through the metadata store), and is answered once the
// partition record shows its new leader (preferred: the first replica;
// unclean: any), or REQUEST_TIMED_OUT at timeout. Ledger-mode partitions
// answer errLedgerElection.
func (b *Broker) ElectLeaders(ctx context.Context, electionType int8, parts []kafka.TopicPartitions, timeout time.Duration) []kafka.ElectionResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := isrctl.Client{Store: b.cfg.Store}
	kind := isr.ElectionKind(electionType)
	var out []kafka.ElectionResult
	var asked []int // indexes into out of the elections asked for
	for _, tp := range parts {
		rec, recErr := b.admin.GetTopic(ctx, b.cfg.Namespace, tp.Topic)
		for _, p := range tp.Partitions {
			r := kafka.ElectionResult{Topic: tp.Topic, Partition: p}
			switch {
			case recErr != nil:
				r.Err = topicErr(recErr)
			case p < 0 || p >= rec.Partitions:
				r.Err = kerr.UnknownTopicOrPartition
			case !rec.IsISR():
				r.Err = errLedgerElection
			default:
				if err := client.Elect(ctx, isrnode.PartitionName(tp.Topic, p), kind); err != nil {
					r.Err = electionErr(err)
				} else {
					asked = append(asked, len(out))
				}
			}
			out = append(out, r)
		}
	}
	for _, i := range asked {
		name := isrnode.PartitionName(out[i].Topic, out[i].Partition)
		for {
			if st, ok := b.isrRecord(ctx, name); ok && elected(st, kind) {
				break
			}
			select {
			case <-ctx.Done():
				out[i].Err = kerr.RequestTimedOut
			case <-time.After(electionPoll):
				continue
			}
			break
		}
	}
	return out
}

// elected reports whether a partition record shows the outcome of an
// election of kind.
func elected(st isr.PartitionState, kind isr.ElectionKind) bool {
	if kind == isr.ElectionPreferred {
		return len(st.Replicas) > 0 && st.Leader == st.Replicas[0]
	}
	return st.Leader != isr.NoLeader
}

// electionErr is the Kafka error of a refused or failed election.
func electionErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, meta.ErrUnavailable) {
		return kerr.RequestTimedOut
	}
	return isrnode.KafkaError(err)
}

// isrRecord is a partition's record: from the watch when ISR mode runs
// here, else read from the store.
func (b *Broker) isrRecord(ctx context.Context, name string) (isr.PartitionState, bool) {
	if b.isr != nil {
		return b.isr.record(name)
	}
	kv, err := b.cfg.Store.Get(ctx, isr.PartitionKey(name))
	if err != nil {
		return isr.PartitionState{}, false
	}
	st, err := isr.UnmarshalState(kv.Value)
	return st, err == nil
}

// LogDirs implements kafka.LogDirDescriber: ISR mode's data directory
// (ISRConfig.Dir) with every replica this broker holds, and its file
// system's size; none without ISR mode (ledger-mode data is on bookies).
func (b *Broker) LogDirs(context.Context) ([]kafka.LogDir, error) {
	if b.isr == nil {
		return nil, nil
	}
	d := kafka.LogDir{Dir: b.isr.mgr.Dir()}
	d.TotalBytes, d.UsableBytes = diskSpace(d.Dir)
	for _, rl := range b.isr.mgr.ReplicaLogs() {
		topic, idx, ok := isrnode.SplitPartitionName(rl.Partition)
		if !ok {
			continue
		}
		d.Replicas = append(d.Replicas, kafka.LogDirReplica{Topic: topic, Partition: idx, Size: rl.Size, OffsetLag: rl.Lag})
	}
	return []kafka.LogDir{d}, nil
}
