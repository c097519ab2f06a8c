package group

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/clock"
	"quire/internal/kafka"
	"quire/internal/meta"
)

// DefaultKeyPrefix is where group offsets live in the metadata store: one key
// per group, the URL-path-escaped group id appended.
const DefaultKeyPrefix = "/quire/kafka/groups/"

// Defaults of Config.
const (
	// DefaultInitialRebalanceDelay is shorter than Kafka's 3 s: it only
	// saves rebalances when many consumers start together, and every new
	// group waits for it.
	DefaultInitialRebalanceDelay = 100 * time.Millisecond
	DefaultMinSessionTimeout     = 6 * time.Second
	DefaultMaxSessionTimeout     = 30 * time.Minute
	DefaultMaxMembers            = 1000
	DefaultMaxMetadataBytes      = 4096
	// DefaultMaxOffsetsBytes keeps one group's key well below etcd's
	// default 1.5 MiB request limit.
	DefaultMaxOffsetsBytes      = 1 << 20
	DefaultStoreTimeout         = 10 * time.Second
	DefaultOwnershipCheckPeriod = time.Second
	DefaultIdleGroupRetention   = 10 * time.Minute
	// DefaultOffsetsRetention is Kafka's offsets.retention.minutes (7 days).
	DefaultOffsetsRetention = 7 * 24 * time.Hour
	// DefaultOffsetsRetentionCheckPeriod is Kafka's
	// offsets.retention.check.interval.ms.
	DefaultOffsetsRetentionCheckPeriod = 10 * time.Minute
)

// Config configures a Coordinator. Zero values take the defaults above.
type Config struct {
	// Store holds committed offsets. Required.
	Store meta.Store
	// KeyPrefix is the store prefix of group keys (DefaultKeyPrefix).
	KeyPrefix string
	// Owns reports whether this broker coordinates the group; nil owns all.
	// Groups it stops owning are dropped (checked every
	// OwnershipCheckPeriod and on every request).
	Owns func(group string) bool
	// Clock drives session and rebalance timeouts (clock.Real{} if nil).
	Clock clock.Clock
	// Logger (slog.Default() if nil).
	Logger *slog.Logger

	// InitialRebalanceDelay: see GroupConfig. Negative disables it.
	InitialRebalanceDelay time.Duration
	MinSessionTimeout     time.Duration
	MaxSessionTimeout     time.Duration
	// MaxMembers per group (Kafka's group.max.size).
	MaxMembers int
	// MaxMetadataBytes per committed offset (offset.metadata.max.bytes).
	MaxMetadataBytes int
	// MaxOffsetsBytes bounds one group's stored offsets; a commit that would
	// grow them past it fails with OFFSET_METADATA_TOO_LARGE.
	MaxOffsetsBytes int
	// StoreTimeout bounds each store operation.
	StoreTimeout time.Duration
	// OwnershipCheckPeriod: how often loaded groups are checked against Owns.
	OwnershipCheckPeriod time.Duration
	// IdleGroupRetention: an Empty group with no offsets is forgotten after
	// this long (Kafka removes them at its next offsets cleanup).
	IdleGroupRetention time.Duration
	// OffsetsRetention: how long committed offsets outlive their group
	// (see Group.ExpireOffsets); checked every OffsetsRetentionCheckPeriod
	// over every stored group this broker owns.
	OffsetsRetention            time.Duration
	OffsetsRetentionCheckPeriod time.Duration
	// NewMemberID makes member ids (prefix-UUID if nil); tests override it.
	NewMemberID func(prefix string) string
}

type clientInfoKey struct{}

// WithClient attaches the client id and host of the connection to ctx;
// DescribeGroups shows them for the members that joined with it.
func WithClient(ctx context.Context, info ClientInfo) context.Context {
	return context.WithValue(ctx, clientInfoKey{}, info)
}

func clientFrom(ctx context.Context) ClientInfo {
	if info, ok := ctx.Value(clientInfoKey{}).(ClientInfo); ok {
		return info
	}
	// What the Kafka front end says about the request's connection.
	info, _ := kafka.ClientFrom(ctx)
	return ClientInfo{ID: info.ID, Host: info.Host}
}

// Coordinator serves every group this broker owns. It implements
// kafka.GroupCoordinator.
type Coordinator struct {
	cfg      Config
	groupCfg GroupConfig
	log      *slog.Logger
	waiterID atomic.Uint64

	mu          sync.Mutex
	groups      map[string]*entry
	closed      bool
	checkTimer  clock.Timer
	expiryTimer clock.Timer

	// blockedHook, set by tests before use, is called after a JoinGroup or
	// SyncGroup blocks (so tests wait for that event instead of polling).
	blockedHook func(group string)
}

// entry is one loaded group with what the shell keeps around it.
// Lock order: io before mu; Coordinator.mu may be taken while holding mu.
type entry struct {
	name string
	// io serializes the store operations of this group (load and writes),
	// so that each write starts from the version the previous one left.
	io sync.Mutex

	mu      sync.Mutex
	g       *Group
	removed bool // evicted from Coordinator.groups: look it up again
	loaded  bool // offsets and version reflect the store
	version meta.Version
	busy    int // store operations in flight; no eviction meanwhile
	waiters map[WaiterID]chan Delivery

	timer     clock.Timer
	timerAt   time.Time
	timerSeq  uint64
	idleSince time.Time
}

// New returns a Coordinator. Close it to stop its timers.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Store == nil {
		return nil, errors.New("group: Config.Store is required")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.Owns == nil {
		cfg.Owns = func(string) bool { return true }
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.InitialRebalanceDelay == 0:
		cfg.InitialRebalanceDelay = DefaultInitialRebalanceDelay
	case cfg.InitialRebalanceDelay < 0:
		cfg.InitialRebalanceDelay = 0
	}
	setDefault(&cfg.MinSessionTimeout, DefaultMinSessionTimeout)
	setDefault(&cfg.MaxSessionTimeout, DefaultMaxSessionTimeout)
	setDefault(&cfg.MaxMembers, DefaultMaxMembers)
	setDefault(&cfg.MaxMetadataBytes, DefaultMaxMetadataBytes)
	setDefault(&cfg.MaxOffsetsBytes, DefaultMaxOffsetsBytes)
	setDefault(&cfg.StoreTimeout, DefaultStoreTimeout)
	setDefault(&cfg.OwnershipCheckPeriod, DefaultOwnershipCheckPeriod)
	setDefault(&cfg.IdleGroupRetention, DefaultIdleGroupRetention)
	setDefault(&cfg.OffsetsRetention, DefaultOffsetsRetention)
	setDefault(&cfg.OffsetsRetentionCheckPeriod, DefaultOffsetsRetentionCheckPeriod)
	if cfg.NewMemberID == nil {
		cfg.NewMemberID = randomMemberID
	}
	c := &Coordinator{
		cfg: cfg,
		groupCfg: GroupConfig{
			InitialRebalanceDelay: cfg.InitialRebalanceDelay,
			MinSessionTimeout:     cfg.MinSessionTimeout,
			MaxSessionTimeout:     cfg.MaxSessionTimeout,
			MaxMembers:            cfg.MaxMembers,
			MaxMetadataBytes:      cfg.MaxMetadataBytes,
			NewMemberID:           cfg.NewMemberID,
		},
		log:    cfg.Logger.With("component", "kafka-groups"),
		groups: map[string]*entry{},
	}
	c.mu.Lock()
	c.checkTimer = c.cfg.Clock.AfterFunc(c.cfg.OwnershipCheckPeriod, c.check)
	c.expiryTimer = c.cfg.Clock.AfterFunc(c.cfg.OffsetsRetentionCheckPeriod, c.expireOffsets)
	c.mu.Unlock()
	return c, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// randomMemberID is Kafka's clientId-UUID.
func randomMemberID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	id := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	if prefix == "" {
		return id
	}
	return prefix + "-" + id
}

// Close stops the timers and answers blocked calls with NOT_COORDINATOR.
func (c *Coordinator) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.checkTimer.Stop()
	c.expiryTimer.Stop()
	entries := c.snapshot()
	c.mu.Unlock()
	for _, e := range entries {
		e.mu.Lock()
		if !e.removed {
			e.g.Unload()
		}
		c.release(e)
	}
}

// snapshot lists the entries; c.mu must be held.
func (c *Coordinator) snapshot() []*entry {
	out := make([]*entry, 0, len(c.groups))
	for _, e := range c.groups {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (c *Coordinator) key(group string) string { return c.cfg.KeyPrefix + url.PathEscape(group) }

// acquire returns the group's entry loaded and with mu held (and io too
// when withIO), or the error to answer with.
func (c *Coordinator) acquire(ctx context.Context, name string, withIO bool) (*entry, *kerr.Error) {
	for {
		if !c.cfg.Owns(name) {
			c.drop(name)
			return nil, kerr.NotCoordinator
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, kerr.NotCoordinator
		}
		e := c.groups[name]
		if e == nil {
			e = &entry{name: name, g: NewGroup(name, c.groupCfg), waiters: map[WaiterID]chan Delivery{}}
			c.groups[name] = e
		}
		c.mu.Unlock()
		if withIO {
			e.io.Lock()
		}
		e.mu.Lock()
		if e.removed {
			e.mu.Unlock()
			if withIO {
				e.io.Unlock()
			}
			continue
		}
		if e.loaded {
			return e, nil
		}
		e.mu.Unlock()
		if !withIO {
			e.io.Lock()
		}
		err := c.load(ctx, e)
		e.io.Unlock()
		if err != nil {
			c.log.Warn("cannot load group offsets", "group", name, "err", err)
			return nil, kerr.CoordinatorLoadInProgress
		}
	}
}

// load reads the group's offsets from the store unless they are loaded.
// e.io must be held, e.mu not.
func (c *Coordinator) load(ctx context.Context, e *entry) error {
	e.mu.Lock()
	if e.loaded || e.removed {
		e.mu.Unlock()
		return nil
	}
	e.busy++
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	kv, err := c.cfg.Store.Get(ctx, c.key(e.name))
	cancel()
	var offsets map[TopicPartition]Offset
	var pending map[int64]map[TopicPartition]Offset
	var protocolType string
	switch {
	case errors.Is(err, meta.ErrNotFound):
		kv, err = meta.KV{}, nil
		offsets = map[TopicPartition]Offset{}
	case err == nil:
		offsets, protocolType, err = decodeOffsets(kv.Value)
		if err == nil {
			pending, err = decodePending(kv.Value)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.busy--
	if err != nil {
		e.loaded = false
		return fmt.Errorf("load group %q: %w", e.name, err)
	}
	e.g.LoadOffsets(offsets, protocolType)
	e.g.LoadPending(pending)
	e.version = kv.Version
	e.loaded = true
	return nil
}

// release delivers what the group answered, logs its events, re-arms its
// timer, evicts it if nothing is left of it, and unlocks e.mu.
func (c *Coordinator) release(e *entry) {
	for _, d := range e.g.TakeDeliveries() {
		if ch, ok := e.waiters[d.Waiter]; ok {
			delete(e.waiters, d.Waiter)
			ch <- d // buffered: each waiter gets one delivery
		}
	}
	for _, ev := range e.g.TakeEvents() {
		c.log.Info(ev, "group", e.name)
	}
	if !e.removed && !e.g.Exists() && e.busy == 0 && len(e.waiters) == 0 {
		c.evict(e)
	}
	c.rearm(e)
	e.mu.Unlock()
}

// evict forgets the entry; e.mu must be held.
func (c *Coordinator) evict(e *entry) {
	e.removed = true
	c.mu.Lock()
	if c.groups[e.name] == e {
		delete(c.groups, e.name)
	}
	c.mu.Unlock()
}

// rearm schedules the group's timer at its next deadline; e.mu must be held.
func (c *Coordinator) rearm(e *entry) {
	deadline, ok := e.g.NextDeadline()
	if e.removed || !ok {
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		return
	}
	if e.timer != nil && e.timerAt.Equal(deadline) {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timerSeq++
	seq := e.timerSeq
	e.timerAt = deadline
	e.timer = c.cfg.Clock.AfterFunc(deadline.Sub(c.cfg.Clock.Now()), func() { c.fire(e, seq) })
}

func (c *Coordinator) fire(e *entry, seq uint64) {
	e.mu.Lock()
	if e.removed {
		e.mu.Unlock()
		return
	}
	if e.timerSeq == seq {
		e.timer = nil
	}
	e.g.Tick(c.cfg.Clock.Now())
	c.release(e)
}

// drop unloads a group this broker no longer owns.
func (c *Coordinator) drop(name string) {
	c.mu.Lock()
	e := c.groups[name]
	c.mu.Unlock()
	if e == nil {
		return
	}
	e.mu.Lock()
	if !e.removed {
		if e.g.State() != Dead {
			c.log.Info("no longer coordinating group", "group", name)
		}
		// Also when Dead: a delete in flight must not bring it back.
		e.g.Unload()
	}
	c.release(e)
}

// check runs every OwnershipCheckPeriod: it drops groups this broker no
// longer owns and forgets groups that have been idle for IdleGroupRetention.
func (c *Coordinator) check() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	entries := c.snapshot()
	c.mu.Unlock()
	now := c.cfg.Clock.Now()
	for _, e := range entries {
		if !c.cfg.Owns(e.name) {
			c.drop(e.name)
			continue
		}
		e.mu.Lock()
		if !e.removed && e.g.State() == Empty && e.g.Idle() && e.busy == 0 && len(e.waiters) == 0 {
			if e.idleSince.IsZero() {
				e.idleSince = now
			} else if now.Sub(e.idleSince) >= c.cfg.IdleGroupRetention {
				c.evict(e)
			}
		} else {
			e.idleSince = time.Time{}
		}
		c.release(e)
	}
	c.mu.Lock()
	if !c.closed {
		c.checkTimer = c.cfg.Clock.AfterFunc(c.cfg.OwnershipCheckPeriod, c.check)
	}
	c.mu.Unlock()
}

// expireOffsets runs every OffsetsRetentionCheckPeriod: it removes the
// expired offsets of every stored group this broker owns (loading the groups
// it has not loaded yet, as Kafka keeps all of them loaded).
func (c *Coordinator) expireOffsets() {
	ctx := context.Background()
	expired := 0
	if err := c.storedGroups(ctx, func(name string, _ []byte) {
		expired += c.expireGroup(ctx, name)
	}); err != nil {
		c.log.Warn("cannot list groups to expire offsets", "err", err)
	}
	if expired > 0 {
		c.log.Info("expired committed offsets", "offsets", expired)
	}
	c.mu.Lock()
	if !c.closed {
		c.expiryTimer = c.cfg.Clock.AfterFunc(c.cfg.OffsetsRetentionCheckPeriod, c.expireOffsets)
	}
	c.mu.Unlock()
}

// expireGroup removes one group's expired offsets; it returns how many.
func (c *Coordinator) expireGroup(ctx context.Context, name string) int {
	e, err := c.acquire(ctx, name, true)
	if err != nil {
		return 0
	}
	defer e.io.Unlock()
	n := 0
	if w := e.g.ExpireOffsets(c.cfg.Clock.Now(), c.cfg.OffsetsRetention); w != nil {
		if err := c.write(ctx, e, w); err == nil {
			n = len(w.Delete)
		}
	}
	c.release(e)
	return n
}

// addWaiter registers a blocked call; e.mu must be held.
func (c *Coordinator) addWaiter(e *entry) (WaiterID, chan Delivery) {
	id := WaiterID(c.waiterID.Add(1))
	ch := make(chan Delivery, 1)
	e.waiters[id] = ch
	return id, ch
}

// wait blocks until the waiter is answered or ctx ends (false).
func (c *Coordinator) wait(ctx context.Context, e *entry, id WaiterID, ch chan Delivery) (Delivery, bool) {
	select {
	case d := <-ch:
		return d, true
	case <-ctx.Done():
	}
	e.mu.Lock()
	delete(e.waiters, id)
	e.mu.Unlock()
	select {
	case d := <-ch:
		return d, true
	default:
		return Delivery{}, false
	}
}

// write makes w durable and applies it, or aborts it. e.io and e.mu must be
// held; e.mu is released during the store operation and held again on
// return. Other calls may change the group meanwhile: the group must only
// accept what w cannot conflict with (DeleteGroup makes it Dead first).
func (c *Coordinator) write(ctx context.Context, e *entry, w *OffsetWrite) *kerr.Error {
	value, err := e.g.EncodeWith(w)
	if err != nil {
		c.log.Error("cannot encode group offsets", "group", e.name, "err", err)
		e.g.AbortWrite(w)
		return kerr.UnknownServerError
	}
	if len(value) > c.cfg.MaxOffsetsBytes {
		e.g.AbortWrite(w)
		return kerr.OffsetMetadataTooLarge
	}
	version := e.version
	e.busy++
	e.mu.Unlock()
	newVersion, err := c.persist(ctx, e.name, value, version)
	stale := errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrExists) || errors.Is(err, meta.ErrNotFound)
	if err != nil {
		// Another coordinator wrote the key (stale), or the outcome is
		// unknown: either way what we hold may be wrong; reload.
		e.mu.Lock()
		e.loaded = false
		e.mu.Unlock()
		if stale {
			if lerr := c.load(ctx, e); lerr != nil {
				c.log.Warn("cannot reload group offsets", "group", e.name, "err", lerr)
			}
		}
	}
	e.mu.Lock()
	e.busy--
	switch {
	case err == nil:
		e.version = newVersion
		e.g.ApplyWrite(w)
		return nil
	case stale:
		c.log.Warn("group offsets written by another coordinator", "group", e.name, "err", err)
		e.g.AbortWrite(w)
		return kerr.NotCoordinator
	default:
		c.log.Warn("cannot write group offsets", "group", e.name, "err", err)
		e.g.AbortWrite(w)
		return kerr.CoordinatorNotAvailable
	}
}

// persist writes (or deletes, when value is nil) the group's key on version.
func (c *Coordinator) persist(ctx context.Context, name string, value []byte, version meta.Version) (meta.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	key := c.key(name)
	switch {
	case value == nil && version == 0:
		return 0, nil
	case value == nil:
		return 0, c.cfg.Store.Delete(ctx, key, version)
	case version == 0:
		return c.cfg.Store.Create(ctx, key, value)
	default:
		return c.cfg.Store.Put(ctx, key, value, version)
	}
}

// JoinGroup implements kafka.GroupCoordinator; it blocks until the rebalance
// it joins completes. ctx should end only when the connection does.
func (c *Coordinator) JoinGroup(ctx context.Context, req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	if req.Group == "" {
		return joinError(req.Version, req.MemberID, kerr.InvalidGroupID)
	}
	e, err := c.acquire(ctx, req.Group, false)
	if err != nil {
		return joinError(req.Version, req.MemberID, err)
	}
	id, ch := c.addWaiter(e)
	resp := e.g.Join(c.cfg.Clock.Now(), id, clientFrom(ctx), req)
	if resp != nil {
		delete(e.waiters, id)
	}
	c.release(e)
	if resp != nil {
		return resp
	}
	if c.blockedHook != nil {
		c.blockedHook(req.Group)
	}
	if d, ok := c.wait(ctx, e, id, ch); ok {
		return d.Join
	}
	return joinError(req.Version, req.MemberID, kerr.RebalanceInProgress)
}

// SyncGroup implements kafka.GroupCoordinator; followers block until the
// leader's assignment arrives.
func (c *Coordinator) SyncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	if req.Group == "" {
		return syncError(req.Version, kerr.InvalidGroupID)
	}
	e, err := c.acquire(ctx, req.Group, false)
	if err != nil {
		return syncError(req.Version, err)
	}
	id, ch := c.addWaiter(e)
	resp := e.g.Sync(c.cfg.Clock.Now(), id, req)
	if resp != nil {
		delete(e.waiters, id)
	}
	c.release(e)
	if resp != nil {
		return resp
	}
	if c.blockedHook != nil {
		c.blockedHook(req.Group)
	}
	if d, ok := c.wait(ctx, e, id, ch); ok {
		return d.Sync
	}
	return syncError(req.Version, kerr.RebalanceInProgress)
}

// Heartbeat implements kafka.GroupCoordinator.
func (c *Coordinator) Heartbeat(ctx context.Context, req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	return onGroup(c, ctx, req.Group, func(code int16) *kmsg.HeartbeatResponse {
		r := kmsg.NewPtrHeartbeatResponse()
		r.Version, r.ErrorCode = req.Version, code
		return r
	}, func(e *entry) *kmsg.HeartbeatResponse { return e.g.Heartbeat(c.cfg.Clock.Now(), req) })
}

// LeaveGroup implements kafka.GroupCoordinator.
func (c *Coordinator) LeaveGroup(ctx context.Context, req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	return onGroup(c, ctx, req.Group, func(code int16) *kmsg.LeaveGroupResponse {
		r := kmsg.NewPtrLeaveGroupResponse()
		r.Version, r.ErrorCode = req.Version, code
		return r
	}, func(e *entry) *kmsg.LeaveGroupResponse { return e.g.Leave(c.cfg.Clock.Now(), req) })
}

// onGroup runs step on the loaded group, or answers errResp with the code
// that keeps the group from being loaded (an empty id, not coordinated
// here, the store unavailable).
func onGroup[R any](c *Coordinator, ctx context.Context, group string, errResp func(code int16) R, step func(e *entry) R) R {
	if group == "" {
		return errResp(kerr.InvalidGroupID.Code)
	}
	e, err := c.acquire(ctx, group, false)
	if err != nil {
		return errResp(err.Code)
	}
	defer c.release(e)
	return step(e)
}

// OffsetCommit implements kafka.GroupCoordinator: accepted offsets are
// durable in the store before the response.
func (c *Coordinator) OffsetCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	e, err := c.acquire(ctx, req.Group, true)
	if err != nil {
		// Reuse the state machine's response shape on a throwaway group.
		resp, _ := NewGroup(req.Group, c.groupCfg).ValidateCommit(c.cfg.Clock.Now(), req)
		FailCommit(resp, nil, err)
		return resp
	}
	defer e.io.Unlock()
	resp, w := e.g.ValidateCommit(c.cfg.Clock.Now(), req)
	if w != nil {
		if err := c.write(ctx, e, w); err != nil {
			FailCommit(resp, w, err)
		}
	}
	c.release(e)
	return resp
}

// OffsetFetch implements kafka.GroupCoordinator: v0–v7 one group, v8+ a batch.
func (c *Coordinator) OffsetFetch(ctx context.Context, req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := kmsg.NewPtrOffsetFetchResponse()
	resp.Version = req.Version
	if req.Version >= 8 {
		for _, rg := range req.Groups {
			var topics []FetchTopic
			if rg.Topics != nil {
				topics = make([]FetchTopic, 0, len(rg.Topics))
				for _, t := range rg.Topics {
					topics = append(topics, FetchTopic{t.Topic, t.Partitions})
				}
			}
			fetched, err := c.fetch(ctx, rg.Group, topics)
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group = rg.Group
			g.ErrorCode = errCode(err)
			for _, ft := range fetched {
				t := kmsg.NewOffsetFetchResponseGroupTopic()
				t.Topic = ft.Topic
				for _, fp := range ft.Partitions {
					p := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					p.Partition, p.Offset, p.LeaderEpoch = fp.Partition, fp.Offset, fp.LeaderEpoch
					md := fp.Metadata
					p.Metadata = &md
					if req.RequireStable && fp.Unstable {
						p.ErrorCode = kerr.UnstableOffsetCommit.Code
					}
					t.Partitions = append(t.Partitions, p)
				}
				g.Topics = append(g.Topics, t)
			}
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	}
	var topics []FetchTopic
	if req.Topics != nil {
		topics = make([]FetchTopic, 0, len(req.Topics))
		for _, t := range req.Topics {
			topics = append(topics, FetchTopic{t.Topic, t.Partitions})
		}
	}
	fetched, err := c.fetch(ctx, req.Group, topics)
	if err != nil {
		if req.Version >= 2 {
			resp.ErrorCode = err.Code
			return resp
		}
		// v0–v1 have no group error: every partition carries it.
		fetched = NewGroup(req.Group, c.groupCfg).Fetch(topics)
	}
	for _, ft := range fetched {
		t := kmsg.NewOffsetFetchResponseTopic()
		t.Topic = ft.Topic
		for _, fp := range ft.Partitions {
			p := kmsg.NewOffsetFetchResponseTopicPartition()
			p.Partition, p.Offset, p.LeaderEpoch = fp.Partition, fp.Offset, fp.LeaderEpoch
			md := fp.Metadata
			p.Metadata = &md
			p.ErrorCode = errCode(err)
			if req.Version >= 7 && req.RequireStable && fp.Unstable && err == nil {
				p.ErrorCode = kerr.UnstableOffsetCommit.Code
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

func (c *Coordinator) fetch(ctx context.Context, group string, topics []FetchTopic) ([]FetchedTopic, *kerr.Error) {
	e, err := c.acquire(ctx, group, false)
	if err != nil {
		return nil, err
	}
	fetched := e.g.Fetch(topics)
	c.release(e)
	return fetched, nil
}

// OffsetDelete implements kafka.GroupCoordinator.
func (c *Coordinator) OffsetDelete(ctx context.Context, req *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	if req.Group == "" {
		r := kmsg.NewPtrOffsetDeleteResponse()
		r.Version, r.ErrorCode = req.Version, kerr.InvalidGroupID.Code
		return r
	}
	e, err := c.acquire(ctx, req.Group, true)
	if err != nil {
		r := kmsg.NewPtrOffsetDeleteResponse()
		r.Version, r.ErrorCode = req.Version, err.Code
		return r
	}
	defer e.io.Unlock()
	resp, w := e.g.DeleteOffsets(req)
	if w != nil {
		if err := c.write(ctx, e, w); err != nil {
			FailDelete(resp, w, err)
		}
	}
	c.release(e)
	return resp
}

// DescribeGroups implements kafka.GroupCoordinator.
func (c *Coordinator) DescribeGroups(ctx context.Context, req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	resp.Version = req.Version
	for _, name := range req.Groups {
		var d kmsg.DescribeGroupsResponseGroup
		// An empty group id is valid here, as in Kafka (and for offsets).
		e, err := c.acquire(ctx, name, false)
		if err != nil {
			d = kmsg.NewDescribeGroupsResponseGroup()
			d.Group = name
			d.ErrorCode = err.Code
		} else {
			d = e.g.Describe(req.Version, req.IncludeAuthorizedOperations)
			c.release(e)
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp
}

// ListGroups implements kafka.GroupCoordinator: the groups this broker
// coordinates, in memory or only in the store (listed as Empty).
func (c *Coordinator) ListGroups(ctx context.Context, req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	resp := kmsg.NewPtrListGroupsResponse()
	resp.Version = req.Version
	keep := func(l kmsg.ListGroupsResponseGroup) bool {
		return matchesFilter(req.StatesFilter, l.GroupState) && matchesFilter(req.TypesFilter, l.GroupType)
	}
	seen := map[string]bool{}
	c.mu.Lock()
	entries := c.snapshot()
	c.mu.Unlock()
	for _, e := range entries {
		if !c.cfg.Owns(e.name) {
			continue
		}
		e.mu.Lock()
		if !e.removed && e.loaded {
			// A loaded group is what the store holds, or newer: one
			// whose delete is being stored is not listed from the store.
			seen[e.name] = true
			if l := e.g.Listing(); e.g.Exists() && keep(l) {
				resp.Groups = append(resp.Groups, l)
			}
		}
		e.mu.Unlock()
	}
	err := c.storedGroups(ctx, func(name string, value []byte) {
		if seen[name] {
			return
		}
		_, protocolType, err := decodeOffsets(value)
		if err != nil {
			return
		}
		l := kmsg.NewListGroupsResponseGroup()
		l.Group, l.ProtocolType, l.GroupState, l.GroupType = name, protocolType, Empty.String(), "classic"
		if keep(l) {
			resp.Groups = append(resp.Groups, l)
		}
	})
	if err != nil {
		c.log.Warn("cannot list groups", "err", err)
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		resp.Groups = nil
		return resp
	}
	sort.Slice(resp.Groups, func(i, j int) bool { return resp.Groups[i].Group < resp.Groups[j].Group })
	return resp
}

// storedGroups calls f with the name and stored record of every group in
// the metadata store that this broker owns, page by page; it stops at the
// first failed list.
func (c *Coordinator) storedGroups(ctx context.Context, f func(name string, value []byte)) error {
	after := ""
	for {
		lctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
		page, err := c.cfg.Store.List(lctx, c.cfg.KeyPrefix, meta.ListOptions{After: after})
		cancel()
		if err != nil {
			return err
		}
		for _, kv := range page.KVs {
			after = kv.Key
			name, err := url.PathUnescape(strings.TrimPrefix(kv.Key, c.cfg.KeyPrefix))
			if err != nil || !c.cfg.Owns(name) {
				continue
			}
			f(name, kv.Value)
		}
		if !page.More {
			return nil
		}
	}
}

// matchesFilter: an empty filter matches everything; names compare
// case-insensitively, as Kafka does.
func matchesFilter(filter []string, value string) bool {
	if len(filter) == 0 {
		return true
	}
	for _, f := range filter {
		if strings.EqualFold(f, value) {
			return true
		}
	}
	return false
}

// DeleteGroups implements kafka.GroupCoordinator: only empty groups, with
// their stored offsets. A group is Dead while its delete is stored (joins
// meanwhile get COORDINATOR_NOT_AVAILABLE and retry), Empty again if the
// store fails it.
func (c *Coordinator) DeleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	resp.Version = req.Version
	for _, name := range req.Groups {
		r := kmsg.NewDeleteGroupsResponseGroup()
		r.Group = name
		r.ErrorCode = errCode(c.deleteGroup(ctx, name))
		resp.Groups = append(resp.Groups, r)
	}
	return resp
}

func (c *Coordinator) deleteGroup(ctx context.Context, name string) *kerr.Error {
	e, err := c.acquire(ctx, name, true)
	if err != nil {
		return err
	}
	defer e.io.Unlock()
	w, err := e.g.DeleteGroup()
	if w != nil {
		err = c.write(ctx, e, w)
		if err == nil {
			c.log.Info("group deleted", "group", name)
		}
	}
	c.release(e)
	return err
}
