package disklog

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/isr"
)

// TestReplicaOverDiskLog drives the real replica core over ISRLog: a
// single-replica leader with flush.messages=1 acknowledges acks=all
// produces, flushing through the log, and checkpoints its HW; after a crash
// (a CrashClone keeping synced data only) a new replica over the recovered
// log has every acknowledged record, the leader epoch's start and the HW.
func TestReplicaOverDiskLog(t *testing.T) {
	fs := vfs.NewCrashableMem()
	clock := newFakeClock()
	cfg := Config{FS: fs, Dir: "/p", SegmentBytes: 512}
	newReplica := func(log *ISRLog) *isr.Replica {
		return isr.NewReplica(isr.ReplicaConfig{Broker: 1, Partition: "p", BrokerEpoch: 1, Log: log, FlushMessages: 1,
			HighWatermarkCheckpointInterval: time.Second}, clock.now)
	}
	log := NewISRLog(openLog(t, cfg), clock.Now)
	r := newReplica(log)
	state := isr.PartitionState{Partition: "p", Replicas: []isr.BrokerID{1}, Leader: 1, LeaderBrokerEpoch: 1, LeaderEpoch: 3,
		ISR: []isr.Member{{ID: 1, BrokerEpoch: 1}}, PartitionEpoch: 1, ControllerEpoch: 1}
	r.ApplyState(state, clock.now)
	r.Ready()
	acked := 0
	for i := range 40 {
		clock.now = clock.now.Add(100 * time.Millisecond)
		r.Produce(isr.ProduceRequest{ID: uint64(i + 1), Partition: "p", Acks: isr.AcksAll, Records: recs(fmt.Sprintf("batch%d-", i), 3)}, clock.now)
		r.Tick(clock.now)
		for _, resp := range r.Ready().ProduceResponses {
			if resp.Err != nil {
				t.Fatalf("produce %d: %v", resp.ID, resp.Err)
			}
			acked++
		}
	}
	mustNil(t, log.Err())
	if acked != 40 || log.FlushedOffset() != 120 || log.HighWatermarkCheckpoint() == 0 || len(log.Log().Segments()) < 3 {
		t.Fatalf("acked %d, flushed %d, HW checkpoint %d, segments %v", acked, log.FlushedOffset(), log.HighWatermarkCheckpoint(), log.Log().Segments())
	}
	hw := log.HighWatermarkCheckpoint()
	cfg.FS = fs.CrashClone(vfs.CrashCloneCfg{})
	recovered := NewISRLog(openLog(t, cfg), clock.Now)
	again := newReplica(recovered)
	if again.LogEndOffset() != 120 || recovered.HighWatermarkCheckpoint() != hw || recovered.LatestEpoch() != 3 {
		t.Fatalf("after a crash: LEO %d HW checkpoint %d (want %d) epoch %d", again.LogEndOffset(), recovered.HighWatermarkCheckpoint(), hw, recovered.LatestEpoch())
	}
	got := recovered.Read(0, 1000)
	if len(got) != 40 || string(got[39].Records[2]) != "batch39-2" || got[0].LeaderEpoch != 3 {
		t.Fatalf("read back %d batches", len(got))
	}
}

// TestReplicaOverDiskLogUnflushedCrash is TestReplicaOverDiskLog's
// contrast: without a flush policy (Kafka's default) the same acknowledged
// records are not on disk after a crash (a power loss: CrashClone keeps
// synced data only), so the flush.messages=1 run above proves the policy,
// not the crash model. (A process kill, as the real-process test in
// cmd/quire does, keeps the page cache and so loses nothing either way.)
func TestReplicaOverDiskLogUnflushedCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	clock := newFakeClock()
	cfg := Config{FS: fs, Dir: "/p", SegmentBytes: 512}
	log := NewISRLog(openLog(t, cfg), clock.Now)
	r := isr.NewReplica(isr.ReplicaConfig{Broker: 1, Partition: "p", BrokerEpoch: 1, Log: log}, clock.now)
	r.ApplyState(isr.PartitionState{Partition: "p", Replicas: []isr.BrokerID{1}, Leader: 1, LeaderBrokerEpoch: 1, LeaderEpoch: 3,
		ISR: []isr.Member{{ID: 1, BrokerEpoch: 1}}, PartitionEpoch: 1, ControllerEpoch: 1}, clock.now)
	r.Ready()
	acked := 0
	for i := range 40 {
		clock.now = clock.now.Add(100 * time.Millisecond)
		r.Produce(isr.ProduceRequest{ID: uint64(i + 1), Partition: "p", Acks: isr.AcksAll, Records: recs(fmt.Sprintf("batch%d-", i), 3)}, clock.now)
		for _, resp := range r.Ready().ProduceResponses {
			if resp.Err == nil {
				acked++
			}
		}
	}
	if acked != 40 || log.FlushedOffset() != 0 {
		t.Fatalf("acked %d, flushed %d", acked, log.FlushedOffset())
	}
	cfg.FS = fs.CrashClone(vfs.CrashCloneCfg{})
	if leo := openLog(t, cfg).EndOffset(); leo >= 120 {
		t.Fatalf("every acknowledged record survived a crash with no flush: LEO %d", leo)
	}
}
