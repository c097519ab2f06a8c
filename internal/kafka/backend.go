package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file is the contract between the Kafka front end (this package: bytes,
// versions, dispatch) and what serves the requests (the broker: ownership,
// topics, partitions, producer ids, groups). Errors a Backend returns are
// franz-go kerr values (*kerr.Error), e.g. kerr.NotLeaderForPartition,
// kerr.UnknownTopicOrPartition; the front end puts their codes on the wire.
// Any other error maps to kerr.UnknownServerError (and is logged).

// Node describes one broker as Kafka metadata shows it.
type Node struct {
	ID   int32
	Host string
	Port int32
	Rack *string
	// Listeners are the node's endpoints per listener name (Kafka's
	// advertised.listeners). A request that came in through a named
	// Listener is answered with the endpoints of the listener of that name,
	// and a node without one is left out (Kafka's behaviour); a request
	// through an unnamed listener gets Host and Port.
	Listeners map[string]Endpoint
}

// Endpoint is a host and port clients connect to.
type Endpoint struct {
	Host string
	Port int32
}

// Endpoint is where a client that came in through the listener named
// listener ("" for an unnamed one) reaches n; false when n has no such
// listener.
func (n Node) Endpoint(listener string) (Endpoint, bool) {
	if listener == "" {
		return Endpoint{Host: n.Host, Port: n.Port}, true
	}
	e, ok := n.Listeners[listener]
	return e, ok
}

// PartitionInfo is one partition in Metadata. Leader is -1 when no broker
// owns it right now (clients retry). In ledger mode Replicas and ISR are just
// the leader: durability comes from the bookies, not broker replicas.
type PartitionInfo struct {
	Partition   int32
	Leader      int32
	LeaderEpoch int32
	Replicas    []int32
	ISR         []int32
	// OfflineReplicas are the replicas whose broker is not live (ISR mode).
	OfflineReplicas []int32
}

// TopicInfo is one topic in Metadata.
type TopicInfo struct {
	Name       string
	ID         [16]byte
	Internal   bool
	Partitions []PartitionInfo
}

// ConfigEntry is one config of a topic or broker for DescribeConfigs.
type ConfigEntry struct {
	Name      string
	Value     *string
	ReadOnly  bool
	Default   bool // the value is the default (not set on the topic)
	Sensitive bool
	// Source is a kmsg.ConfigSource (DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG, …).
	Source kmsg.ConfigSource
	Type   kmsg.ConfigType
	Doc    *string
}

// ConfigOp is one IncrementalAlterConfigs operation on a topic config.
type ConfigOp struct {
	Name  string
	Op    kmsg.IncrementalAlterConfigOp // SET, DELETE, APPEND, SUBTRACT
	Value *string
}

// AppendResult answers one produced batch.
type AppendResult struct {
	BaseOffset     int64
	LogAppendTime  int64 // -1: CreateTime topics
	LogStartOffset int64
	Err            error // a *kerr.Error, or nil
}

// ReadResult answers one fetch of one partition.
type ReadResult struct {
	// Records and then Batches hold whole record batches (v2) exactly as
	// stored, the first one containing the fetched offset, at most maxBytes
	// unless the first batch alone is larger (Kafka returns it anyway so
	// consumers progress). A backend fills either: Records when it has the
	// batches in one piece, Batches to hand over stored batches without
	// copying them (the Fetch answer writes them to the socket as they are).
	// Neither is modified afterwards, by the backend or the front end.
	Records          []byte
	Batches          [][]byte
	HighWatermark    int64
	LastStableOffset int64 // == HighWatermark: no transactions
	LogStartOffset   int64
}

// Size is the bytes of record batches the result holds.
func (r ReadResult) Size() int {
	n := len(r.Records)
	for _, b := range r.Batches {
		n += len(b)
	}
	return n
}

// Bytes returns the record batches in one slice (Records itself when
// Batches is empty, else a copy).
func (r ReadResult) Bytes() []byte {
	if len(r.Batches) == 0 {
		return r.Records
	}
	out := make([]byte, 0, r.Size())
	out = append(out, r.Records...)
	for _, b := range r.Batches {
		out = append(out, b...)
	}
	return out
}

// Partition is one partition this broker owns and serves.
type Partition interface {
	// Append submits one record batch (v2, as the producer sent it). Appends
	// submitted one after another (from one goroutine) are written in that
	// order. It assigns offsets, checks idempotent-producer sequences, and
	// returns once the batch is submitted; the result arrives on the channel
	// once the batch is durable (acks=1 and acks=all both wait for it in
	// ledger mode) or failed. When the partition's log is at its bound of
	// appends in flight, Append waits for room (backpressure) until ctx ends,
	// and then answers REQUEST_TIMED_OUT without appending.
	Append(ctx context.Context, batch []byte) <-chan AppendResult
	// Read returns batches from the one containing offset onwards.
	// kerr.OffsetOutOfRange when offset < LogStartOffset or > HighWatermark.
	// Reading at HighWatermark returns no records.
	Read(ctx context.Context, offset int64, maxBytes int32) (ReadResult, error)
	HighWatermark() int64
	LogStartOffset() int64
	// Wait returns a channel closed once HighWatermark() > offset or the
	// partition stops being served here (for Fetch long-polls).
	Wait(offset int64) <-chan struct{}
	// OffsetForTimestamp returns the first offset whose batch max timestamp
	// is ≥ ts, with that batch's max timestamp; (-1, -1) when none.
	OffsetForTimestamp(ctx context.Context, ts int64) (offset, timestamp int64, err error)
	// MaxTimestamp is ListOffsets' timestamp −3: the offset and timestamp
	// of the record with the largest timestamp; (-1, -1) when empty.
	MaxTimestamp(ctx context.Context) (offset, timestamp int64, err error)
}

// EpochPartition is a Partition whose log has leader epochs (ISR mode:
// a leader and followers, Kafka's leader-epoch cache). Fetch and
// ListOffsets check a request's current_leader_epoch against LeaderEpoch
// (KIP-320: older FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, −1 not
// checked) and OffsetForLeaderEpoch answers from EndOffsetForEpoch. A
// Partition without it (ledger mode) has no epochs: nothing is checked.
type EpochPartition interface {
	Partition
	// LeaderEpoch is the partition's leader epoch as its leader here knows it.
	LeaderEpoch() int32
	// EndOffsetForEpoch is the largest epoch ≤ epoch in the leader-epoch
	// cache and the offset where it ends (the log end offset for the
	// latest), with the leader epoch it was answered in; (−1, −1) when
	// there is none (Kafka's UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
	// kerr.NotLeaderForPartition when this broker no longer leads it.
	EndOffsetForEpoch(ctx context.Context, epoch int32) (endEpoch int32, endOffset int64, leaderEpoch int32, err error)
}

// OffsetEpochPartition is an EpochPartition that knows the leader epoch of
// each offset of its log: ListOffsets (v4+) answers leader_epoch with the
// epoch of the offset it found, as Kafka does (clients keep it with the
// position and validate it with OffsetForLeaderEpoch: truncation
// detection). A Partition without it answers −1.
type OffsetEpochPartition interface {
	EpochPartition
	// EpochForOffset is the leader epoch of the batch holding offset: the
	// latest epoch in the leader-epoch cache that starts at or before it
	// (for the high watermark, the latest epoch started by then); −1 when
	// none is known.
	EpochForOffset(ctx context.Context, offset int64) int32
}

// ReadReplicaSelector is a Partition whose leader may send a consumer to
// read it from another replica (KIP-392; Kafka's replica.selector.class).
// A consumer's Fetch v11+ naming a rack_id asks it for each partition; an
// answer ≥ 0 is given as that partition's preferred_read_replica, with no
// records (and the fetch answers without waiting), and the client then
// fetches the partition from that broker.
type ReadReplicaSelector interface {
	Partition
	// PreferredReadReplica is the broker a consumer in rack fetching from
	// offset should read from: −1 for this one.
	PreferredReadReplica(ctx context.Context, rack string, offset int64) int32
}

// FollowerFetchBackend is implemented by a Backend whose partitions have
// follower replicas that serve consumers too (ISR mode, KIP-392's follower
// fetching). A consumer's Fetch v11+ (the versions with rack_id and
// preferred_read_replica, whose clients go back to the leader when a
// follower answers OFFSET_OUT_OF_RANGE) takes its partitions from
// FetchPartition instead of Partition: the leader's, or a follower's that
// reads up to the follower's HW; older versions, and every other request,
// keep asking Partition (NOT_LEADER_OR_FOLLOWER from a follower).
type FollowerFetchBackend interface {
	FetchPartition(ctx context.Context, topic string, partition int32) (Partition, error)
}

// TopicPartitions names some partitions of one topic.
type TopicPartitions struct {
	Topic      string
	Partitions []int32
}

// ElectionResult is one partition's answer to ElectLeaders: nil, or an
// error whose *kerr.Error is the code (its text the message).
type ElectionResult struct {
	Topic     string
	Partition int32
	Err       error
}

// LeaderElector is implemented by a Backend whose partitions have leaders
// that can be elected (ISR mode's controller; Kafka's ElectLeaders).
type LeaderElector interface {
	// ElectLeaders runs an election of electionType (0 preferred, 1
	// unclean) for each partition of each existing topic named (the front
	// end answers unknown topics and partitions itself) and answers each
	// once its new leader shows, or at timeout (kerr.RequestTimedOut): nil,
	// kerr.ElectionNotNeeded, kerr.PreferredLeaderNotAvailable,
	// kerr.EligibleLeadersNotAvailable, kerr.UnknownTopicOrPartition, … in
	// the order asked.
	ElectLeaders(ctx context.Context, electionType int8, partitions []TopicPartitions, timeout time.Duration) []ElectionResult
}

// LogDir is one log directory of this broker (DescribeLogDirs).
type LogDir struct {
	Dir string
	// Err is a *kerr.Error (KAFKA_STORAGE_ERROR: the directory is offline),
	// or nil.
	Err error
	// TotalBytes and UsableBytes are the file system's size and what is
	// free for it; −1 when unknown.
	TotalBytes, UsableBytes int64
	Replicas                []LogDirReplica
}

// LogDirReplica is one replica's log in a LogDir.
type LogDirReplica struct {
	Topic     string
	Partition int32
	Size      int64 // bytes
	OffsetLag int64 // how far its end is behind the leader's HW; 0 when unknown
}

// LogDirDescriber is implemented by a Backend that keeps partition
// replicas in log directories of its own (ISR mode). Without it a broker
// has no log directories: DescribeLogDirs answers none.
type LogDirDescriber interface {
	LogDirs(ctx context.Context) ([]LogDir, error)
}

// ReassignmentRequest is one partition of an AlterPartitionReassignments
// request: its target replicas, or nil to cancel its reassignment.
type ReassignmentRequest struct {
	Topic     string
	Partition int32
	Replicas  []int32
}

// ReassignmentResult answers one ReassignmentRequest: nil, or an error
// whose *kerr.Error is the code (its text the message).
type ReassignmentResult struct {
	Topic     string
	Partition int32
	Err       error
}

// Reassignment is one partition's reassignment in progress
// (ListPartitionReassignments): all its replicas now, those being added
// and those being removed.
type Reassignment struct {
	Topic                      string
	Partition                  int32
	Replicas, Adding, Removing []int32
}

// PartitionReassigner is implemented by a Backend whose partitions have
// replicas that can move between brokers (ISR mode; Kafka's KIP-455).
// Without it a partition has one replica, which leads it: nothing to move
// (reassignments.go).
type PartitionReassigner interface {
	// AlterPartitionReassignments starts, replaces or (nil Replicas)
	// cancels each partition's reassignment (of existing topics: the front
	// end answers unknown ones itself), with allowRFChange false refusing
	// a change of replication factor (KIP-860), and answers each once the
	// partition's record shows the change, or at timeout
	// (kerr.RequestTimedOut): nil, kerr.InvalidReplicaAssignment,
	// kerr.NoReassignmentInProgress, kerr.InvalidReplicationFactor, … in
	// the order asked.
	AlterPartitionReassignments(ctx context.Context, reqs []ReassignmentRequest, allowRFChange bool, timeout time.Duration) []ReassignmentResult
	// ListPartitionReassignments lists the reassignments in progress of
	// the partitions named (nil: of every topic; a topic's nil Partitions:
	// all of its).
	ListPartitionReassignments(ctx context.Context, topics []TopicPartitions) ([]Reassignment, error)
}

// BrokerConfigAlterer is implemented by a Backend with dynamic broker
// configs (Kafka's IncrementalAlterConfigs on a BROKER resource: broker
// "" is the cluster-wide default, otherwise a broker id). Without it
// broker configs are static: INVALID_REQUEST.
type BrokerConfigAlterer interface {
	AlterBrokerConfigs(ctx context.Context, broker string, ops []ConfigOp, validateOnly bool) error
}

// GroupCoordinator serves the classic consumer-group protocol and committed
// offsets. Each method answers one request completely; JoinGroup and
// SyncGroup may block until the rebalance they wait for completes (or ctx
// ends). It answers NOT_COORDINATOR for groups this broker does not own.
type GroupCoordinator interface {
	JoinGroup(ctx context.Context, req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse
	SyncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse
	Heartbeat(ctx context.Context, req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse
	LeaveGroup(ctx context.Context, req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse
	OffsetCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse
	OffsetFetch(ctx context.Context, req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse
	OffsetDelete(ctx context.Context, req *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse
	ListGroups(ctx context.Context, req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse
	DescribeGroups(ctx context.Context, req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse
	DeleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse
}

// Backend is what the front end serves requests from.
type Backend interface {
	// Self is this broker; Brokers every live broker (Self included).
	Self() Node
	Brokers(ctx context.Context) ([]Node, error)
	ClusterID() string
	// ControllerID is the broker Metadata names as controller (admin
	// requests work on any broker in ledger mode).
	ControllerID() int32

	// Topics describes the named topics (nil: every topic). A name that does
	// not exist is left out, unless autoCreate is set and auto-creation is
	// enabled, in which case it is created with the default partition count.
	Topics(ctx context.Context, names []string, autoCreate bool) ([]TopicInfo, error)
	// CreateTopic: kerr.TopicAlreadyExists, kerr.InvalidPartitions,
	// kerr.InvalidTopicException, kerr.InvalidConfig, … numPartitions −1
	// means the default.
	CreateTopic(ctx context.Context, name string, numPartitions int32, configs map[string]*string, validateOnly bool) error
	DeleteTopic(ctx context.Context, name string) error
	// CreatePartitions grows a topic to count partitions (never shrinks:
	// kerr.InvalidPartitions).
	CreatePartitions(ctx context.Context, name string, count int32, validateOnly bool) error
	TopicConfigs(ctx context.Context, name string) ([]ConfigEntry, error)
	AlterTopicConfigs(ctx context.Context, name string, ops []ConfigOp, validateOnly bool) error
	BrokerConfigs(ctx context.Context) ([]ConfigEntry, error)

	// Partition returns a partition this broker serves, loading it (taking
	// the topic over) if this broker owns its bundle:
	// kerr.NotLeaderForPartition when another broker owns it,
	// kerr.UnknownTopicOrPartition when it does not exist.
	Partition(ctx context.Context, topic string, partition int32) (Partition, error)

	// InitProducerID allocates a producer id (epoch 0) for an idempotent
	// producer. Transactional ids are not supported (the front end does not
	// advertise transactions).
	InitProducerID(ctx context.Context) (id int64, epoch int16, err error)

	// Coordinator returns the broker that coordinates a group
	// (FindCoordinator key type 0).
	Coordinator(ctx context.Context, group string) (Node, error)
	Groups() GroupCoordinator

	// MaxMessageBytes is the largest record batch a produce may carry
	// (kerr.MessageTooLarge above it) unless the topic overrides it.
	MaxMessageBytes() int32
}

// ReplicaFetchBackend is implemented by a Backend whose partitions are
// replicated by follower brokers fetching from their leaders (ISR mode). A
// Fetch from a replica (replica_id ≥ 0, or from v15 replica_state's
// replica_id ≥ 0) goes to HandleReplicaFetch whole instead of being served
// like a consumer's: it answers every partition of the request (errors as
// kerr codes), long-polls as max_wait_ms and min_bytes ask, and returns a
// response of the request's version (req.ResponseKind()). A Backend without
// it serves replica fetches like a consumer's.
type ReplicaFetchBackend interface {
	HandleReplicaFetch(ctx context.Context, req *kmsg.FetchRequest) *kmsg.FetchResponse
}

// ClientInfo names the client a request came from: its client.id and
// host. The front end puts it in the context of every group request, so
// DescribeGroups can show who the members are.
type ClientInfo struct {
	ID   string
	Host string
}

type clientInfoKey struct{}

// ClientFrom returns the ClientInfo the front end put in ctx.
func ClientFrom(ctx context.Context) (ClientInfo, bool) {
	info, ok := ctx.Value(clientInfoKey{}).(ClientInfo)
	return info, ok
}

func withClient(ctx context.Context, info ClientInfo) context.Context {
	return context.WithValue(ctx, clientInfoKey{}, info)
}

type acksKey struct{}

// AcksFrom returns the acks of the produce request whose Partition.Append
// ctx is (0, 1 or -1); false outside one. A backend whose replication
// depends on it (ISR mode) reads it there; ledger mode waits for
// durability whatever it is.
func AcksFrom(ctx context.Context) (int16, bool) {
	acks, ok := ctx.Value(acksKey{}).(int16)
	return acks, ok
}

func withAcks(ctx context.Context, acks int16) context.Context {
	return context.WithValue(ctx, acksKey{}, acks)
}

type replicationFactorKey struct{}

// ReplicationFactorFrom returns the replication_factor of the CreateTopics
// request whose Backend.CreateTopic ctx is (-1: the default); false
// outside one.
func ReplicationFactorFrom(ctx context.Context) (int16, bool) {
	rf, ok := ctx.Value(replicationFactorKey{}).(int16)
	return rf, ok
}
