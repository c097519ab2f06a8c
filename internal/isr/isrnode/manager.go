package isrnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/isr"
	"quire/internal/isr/disklog"
	"quire/internal/meta"
)

// Controller is where a leader's ISR proposals go: the active controller
// (*isrctl.Service in one process; isrctl.Client wherever it runs, through
// the metadata store, as the broker wires it).
type Controller interface {
	AlterPartition(ctx context.Context, req isr.AlterPartitionRequest) (isr.AlterPartitionResponse, error)
}

// Config configures a Manager.
type Config struct {
	// Broker is this broker's id.
	Broker isr.BrokerID
	// Store is the metadata store: the registration and the partition
	// records live there.
	Store meta.Store
	// Controller takes the ISR proposals.
	Controller Controller
	// Resolve returns the Kafka listener address (host:port) of a broker,
	// where its leaders answer Fetch.
	Resolve func(isr.BrokerID) (string, error)
	// Dir holds one directory per partition replica (FS: vfs.Default when
	// nil).
	Dir string
	FS  vfs.FS
	// Log configures every replica's log (its FS and Dir are set here).
	Log disklog.Config
	// Replica configures every replica's core (Broker, Partition,
	// BrokerEpoch and Log are set here, and FetchBackoff, as the fetchers
	// long-poll and back off instead): MinISR, LagTimeMax, flush policy.
	Replica isr.ReplicaConfig
	// SessionTTL bounds how long a dead broker stays registered (default
	// 10 s): its end is how the controller learns the broker is gone.
	SessionTTL time.Duration
	// Tick drives the cores' timers (default 50 ms).
	Tick time.Duration
	// FetchMaxWait is how long a leader holds a follower's fetch that has
	// nothing new (replica.fetch.wait.max.ms, default 500 ms).
	FetchMaxWait time.Duration
	// FetchMaxBytes bounds one fetch response (replica.fetch.response.max.bytes,
	// default 10 MiB), FetchPartitionMaxBytes each partition's share
	// (replica.fetch.max.bytes, default 1 MiB).
	FetchMaxBytes          int32
	FetchPartitionMaxBytes int32
	// FetchBackoff is the wait after a failed fetch or a partition's error
	// (replica.fetch.backoff.ms, default 1 s); failed connections back off
	// from it up to 10 times as long.
	FetchBackoff time.Duration
	// FetchTLS, when set, is how followers dial the leaders' Kafka
	// listeners (fetcher.go's newReplicaClient); nil: plaintext.
	FetchTLS *tls.Config
	// AlterPartitionTimeout bounds one ISR proposal's round trip (default
	// 5 s).
	AlterPartitionTimeout time.Duration
	// ThrottleWindow samples the replication throttle's rates (zero:
	// Kafka's 11 windows of 1 s; throttle.go).
	ThrottleWindow ThrottleWindow
	// TopicID names a topic in Fetch v13+ (default DefaultTopicID). Leaders
	// and followers must use the same.
	TopicID func(topic string) [16]byte
	Logger  *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Store == nil || c.Controller == nil || c.Resolve == nil || c.Dir == "" {
		return errors.New("isrnode: Config needs Store, Controller, Resolve and Dir")
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 10 * time.Second
	}
	if c.Tick <= 0 {
		c.Tick = 50 * time.Millisecond
	}
	if c.FetchMaxWait <= 0 {
		c.FetchMaxWait = 500 * time.Millisecond
	}
	if c.FetchMaxBytes <= 0 {
		c.FetchMaxBytes = 10 << 20
	}
	if c.FetchPartitionMaxBytes <= 0 {
		c.FetchPartitionMaxBytes = 1 << 20
	}
	if c.FetchBackoff <= 0 {
		c.FetchBackoff = time.Second
	}
	if c.AlterPartitionTimeout <= 0 {
		c.AlterPartitionTimeout = 5 * time.Second
	}
	if c.TopicID == nil {
		c.TopicID = DefaultTopicID
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// cleanShutdownFile marks a directory whose manager closed cleanly (every
// log flushed): Kafka's .kafka_cleanshutdown. Its absence on start, with
// logs present, is an unclean shutdown, which the registration reports.
const cleanShutdownFile = ".clean-shutdown"

// lossEpochFile keeps the broker epoch of the first registration after the
// last unclean shutdown (isr.Registration.LossEpoch).
const lossEpochFile = "loss-epoch"

// Manager runs one broker's ISR replicas: it registers the broker, watches
// the partition records, and for each partition assigned here drives a
// disk-log-backed isr.Replica, leader or follower as the record says. See
// the package doc.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	unclean   bool
	lossEpoch int64
	// diskLogEnds are where the logs found on disk at start ended, by
	// partition: registrations report them (isr.Registration.LogEnds) for
	// replicas not open, so unclean recovery can compare the logs of a
	// partition that has no leader.
	diskLogEnds map[string]isr.ReplicaLogEnd

	// isrShrinks and isrExpands count the ISR changes this broker's
	// leaders proposed and the controller applied (Stats).
	isrShrinks, isrExpands atomic.Int64
	// throttle is the replication throttle (throttle.go).
	throttle *throttles

	mu          sync.Mutex
	closed      bool
	session     meta.Session
	brokerEpoch int64
	replicas    map[string]*replica
	fetchers    map[isr.BrokerID]*fetcher
	topics      map[[16]byte]string // topic id → name, of the replicas here
}

// Start registers the broker (its broker epoch is the registration's
// version), opens nothing yet, and starts watching the partition records:
// a replica is opened when a record names this broker.
func Start(cfg Config) (*Manager, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := cfg.FS.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("isrnode: create %s: %w", cfg.Dir, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{cfg: cfg, log: cfg.Logger.With("component", "isr-node", "broker", cfg.Broker), ctx: ctx, cancel: cancel,
		replicas: map[string]*replica{}, fetchers: map[isr.BrokerID]*fetcher{}, topics: map[[16]byte]string{},
		throttle: newThrottles(cfg.ThrottleWindow)}
	if err := m.readShutdownState(); err != nil {
		cancel()
		return nil, err
	}
	if err := m.readLogEnds(); err != nil {
		cancel()
		return nil, err
	}
	unclean := m.unclean // register clears it
	sess, epoch, err := m.register(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	m.session, m.brokerEpoch = sess, epoch
	m.log.Info("isr node: registered", "brokerEpoch", epoch, "uncleanShutdown", unclean)
	m.wg.Add(2)
	go m.watchPartitions()
	go m.keepRegistered()
	return m, nil
}

// readShutdownState finds out whether the last run ended cleanly, and
// clears the mark for this one.
func (m *Manager) readShutdownState() error {
	fs, marker := m.cfg.FS, m.cfg.FS.PathJoin(m.cfg.Dir, cleanShutdownFile)
	_, err := fs.Stat(marker)
	clean := err == nil
	if clean {
		if err := fs.Remove(marker); err != nil {
			return fmt.Errorf("isrnode: remove %s: %w", marker, err)
		}
	}
	names, err := fs.List(m.cfg.Dir)
	if err != nil {
		return fmt.Errorf("isrnode: list %s: %w", m.cfg.Dir, err)
	}
	hasLogs := slices.ContainsFunc(names, func(n string) bool { _, _, ok := SplitPartitionName(n); return ok })
	m.unclean = !clean && hasLogs
	if b, err := readFile(fs, fs.PathJoin(m.cfg.Dir, lossEpochFile)); err == nil {
		m.lossEpoch, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	return nil
}

// readLogEnds opens each partition log on disk (recovering its tail, as
// opening it for the replica later will) to learn where it ends. It runs
// before anything else opens them.
func (m *Manager) readLogEnds() error {
	fs := m.cfg.FS
	names, err := fs.List(m.cfg.Dir)
	if err != nil {
		return fmt.Errorf("isrnode: list %s: %w", m.cfg.Dir, err)
	}
	slices.Sort(names)
	m.diskLogEnds = map[string]isr.ReplicaLogEnd{}
	for _, name := range names {
		if _, _, ok := SplitPartitionName(name); !ok {
			continue
		}
		lcfg := m.cfg.Log
		lcfg.FS, lcfg.Dir = fs, fs.PathJoin(m.cfg.Dir, name)
		l, err := disklog.Open(lcfg)
		if err != nil {
			// The replica will fail to open too; it reports no log end.
			m.log.Warn("isr node: cannot read a log's end", "partition", name, "err", err)
			continue
		}
		m.diskLogEnds[name] = isr.ReplicaLogEnd{Partition: name, LastEpoch: l.LatestEpoch(), EndOffset: l.EndOffset()}
		if err := l.Close(); err != nil {
			m.log.Warn("isr node: close a log after reading its end", "partition", name, "err", err)
		}
	}
	return nil
}

// logEnds is what a registration reports: every replica's log end, from
// the open replicas and, for the others, from disk at start.
func (m *Manager) logEnds() []isr.ReplicaLogEnd {
	m.mu.Lock()
	defer m.mu.Unlock()
	ends := make(map[string]isr.ReplicaLogEnd, len(m.diskLogEnds)+len(m.replicas))
	for name, e := range m.diskLogEnds {
		ends[name] = e
	}
	for name, r := range m.replicas {
		ends[name] = isr.ReplicaLogEnd{Partition: name, LastEpoch: r.disk.LatestEpoch(), EndOffset: r.disk.EndOffset()}
	}
	out := make([]isr.ReplicaLogEnd, 0, len(ends))
	for _, e := range ends {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b isr.ReplicaLogEnd) int { return strings.Compare(a.Partition, b.Partition) })
	return out
}

// register puts the broker's registration under a new session.
func (m *Manager) register(ctx context.Context) (meta.Session, int64, error) {
	sess, err := m.cfg.Store.NewSession(ctx, m.cfg.SessionTTL)
	if err != nil {
		return nil, 0, fmt.Errorf("isrnode: broker %d: session: %w", m.cfg.Broker, err)
	}
	reg := isr.Registration{ID: m.cfg.Broker, UncleanShutdown: m.unclean, LossEpoch: m.lossEpoch, LogEnds: m.logEnds()}
	key := isr.BrokerKey(m.cfg.Broker)
	var v meta.Version
	for {
		v, err = sess.CreateEphemeral(ctx, key, reg.Marshal())
		if err == nil {
			break
		}
		if !errors.Is(err, meta.ErrExists) {
			sess.Close()
			return nil, 0, fmt.Errorf("isrnode: broker %d: register: %w", m.cfg.Broker, err)
		}
		// The registration of this broker's previous incarnation, killed
		// and restarted within its session TTL: it goes when that session
		// expires (the broker's own registration waits the same way, so
		// no other live process holds this id).
		m.log.Info("isr node: waiting for the registration of a previous session to expire", "broker", m.cfg.Broker)
		if err := waitDeleted(ctx, m.cfg.Store, key); err != nil {
			sess.Close()
			return nil, 0, fmt.Errorf("isrnode: broker %d: register: wait for the previous registration to expire: %w", m.cfg.Broker, err)
		}
	}
	if m.unclean {
		// This registration is the one after the loss: later ones carry
		// its epoch as LossEpoch.
		m.unclean, m.lossEpoch = false, int64(v)
		if err := writeFile(m.cfg.FS, m.cfg.FS.PathJoin(m.cfg.Dir, lossEpochFile), []byte(strconv.FormatInt(int64(v), 10))); err != nil {
			m.log.Warn("isr node: could not keep the loss epoch", "err", err)
		}
	}
	return sess, int64(v), nil
}

// waitDeleted waits until key is not in the store (or ctx ends).
func waitDeleted(ctx context.Context, store meta.Store, key string) error {
	for {
		kv, err := store.Get(ctx, key)
		if errors.Is(err, meta.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		wctx, cancel := context.WithCancel(ctx)
		deleted := false
		for resp := range store.Watch(wctx, key, int64(kv.Version)+1) {
			if resp.Err != nil {
				break
			}
			for _, ev := range resp.Events {
				deleted = deleted || (ev.Key == key && ev.Type == meta.EventDelete)
			}
			if deleted {
				break
			}
		}
		cancel()
		if deleted {
			return nil
		}
		// The watch failed: read the key again, after a pause so that a
		// store that keeps failing is not spun on.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// keepRegistered registers again when the session is lost (the broker was
// cut off from the store for longer than its TTL) and tells every replica
// its new broker epoch.
func (m *Manager) keepRegistered() {
	defer m.wg.Done()
	for {
		m.mu.Lock()
		sess := m.session
		m.mu.Unlock()
		select {
		case <-m.ctx.Done():
			return
		case <-sess.Done():
		}
		m.log.Warn("isr node: session lost; registering again", "err", sess.Err())
		backoff := m.cfg.SessionTTL / 10
		for {
			newSess, epoch, err := m.register(m.ctx)
			if err == nil {
				m.mu.Lock()
				m.session, m.brokerEpoch = newSess, epoch
				reps := m.replicaList()
				m.mu.Unlock()
				for _, r := range reps {
					_ = r.loop.Post(m.ctx, func() { r.core.SetBrokerEpoch(epoch, time.Now()) })
				}
				break
			}
			m.log.Warn("isr node: register", "err", err)
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
	}
}

// watchPartitions applies every partition record (a listing, then the
// watch from its revision; again after a watch error).
func (m *Manager) watchPartitions() {
	defer m.wg.Done()
	for m.ctx.Err() == nil {
		kvs, rev, err := meta.ListAll(m.ctx, m.cfg.Store, isr.PartitionPrefix)
		if err != nil {
			if m.ctx.Err() == nil {
				m.log.Warn("isr node: list partition records", "err", err)
				select {
				case <-m.ctx.Done():
				case <-time.After(m.cfg.FetchBackoff):
				}
			}
			continue
		}
		for _, kv := range kvs {
			m.applyRecord(kv.Key, kv.Value)
		}
		for resp := range m.cfg.Store.Watch(m.ctx, isr.PartitionPrefix, rev+1) {
			if resp.Err != nil {
				if m.ctx.Err() == nil {
					m.log.Warn("isr node: partition watch ended; listing again", "err", resp.Err)
				}
				break
			}
			for _, ev := range resp.Events {
				switch ev.Type {
				case meta.EventPut:
					m.applyRecord(ev.Key, ev.Value)
				case meta.EventDelete:
					// Its topic was deleted: the replica goes, log and all.
					m.removeReplica(strings.TrimPrefix(ev.Key, isr.PartitionPrefix), "its partition was deleted")
				}
			}
		}
	}
}

// applyRecord feeds a partition record to its replica here, opening the
// replica if the record names this broker and it is not open yet.
func (m *Manager) applyRecord(key string, value []byte) {
	st, err := isr.UnmarshalState(value)
	if err != nil {
		m.log.Warn("isr node: skipping an undecodable partition record", "key", key, "err", err)
		return
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	r := m.replicas[st.Partition]
	named := slices.Contains(st.Replicas, m.cfg.Broker)
	_, onDisk := m.diskLogEnds[st.Partition]
	if !named && (r != nil || onDisk) {
		// A reassignment removed this broker (while it ran, or while it
		// was down): the replica stops and its log goes, as Kafka's
		// StopReplica with delete and its stray-log cleanup do.
		m.mu.Unlock()
		m.removeReplica(st.Partition, "a reassignment removed this broker")
		return
	}
	if r == nil {
		if !named {
			m.mu.Unlock()
			return
		}
		r, err = m.openReplica(st.Partition, m.brokerEpoch)
		if err != nil {
			m.mu.Unlock()
			m.log.Error("isr node: open replica", "partition", st.Partition, "err", err)
			return
		}
		m.replicas[st.Partition] = r
		m.topics[m.cfg.TopicID(r.topic)] = r.topic
	}
	m.mu.Unlock()
	_ = r.loop.Post(m.ctx, func() { r.core.ApplyState(st, time.Now()) })
}

// removeReplica stops partition's replica here, if any, and deletes its
// log: the partition's record was deleted with its topic, or no longer
// names this broker (why says which). A replica whose record was deleted
// while this broker was down stays on disk until a record names it again;
// one a reassignment removed meanwhile goes when the record is read.
func (m *Manager) removeReplica(partition, why string) {
	m.mu.Lock()
	r := m.replicas[partition]
	_, onDisk := m.diskLogEnds[partition]
	if r == nil && !onDisk || m.closed {
		m.mu.Unlock()
		return
	}
	delete(m.diskLogEnds, partition)
	delete(m.replicas, partition)
	if r != nil && !slices.ContainsFunc(m.replicaList(), func(o *replica) bool { return o.topic == r.topic }) {
		delete(m.topics, m.cfg.TopicID(r.topic))
	}
	fetchers := make([]*fetcher, 0, len(m.fetchers))
	for _, f := range m.fetchers {
		fetchers = append(fetchers, f)
	}
	m.mu.Unlock()
	for _, f := range fetchers {
		f.forget(partition) // a fetch it still holds is for a replica that is gone
	}
	if r != nil {
		if err := r.close(); err != nil {
			m.log.Warn("isr node: close a removed replica", "partition", partition, "why", why, "err", err)
		}
	}
	if err := m.cfg.FS.RemoveAll(m.cfg.FS.PathJoin(m.cfg.Dir, partition)); err != nil {
		m.log.Warn("isr node: delete a removed replica's log", "partition", partition, "why", why, "err", err)
		return
	}
	m.log.Info("isr node: deleted a replica and its log", "partition", partition, "why", why)
}

func (m *Manager) replicaList() []*replica {
	out := make([]*replica, 0, len(m.replicas))
	for _, r := range m.replicas {
		out = append(out, r)
	}
	return out
}

// replica returns partition's replica here, or ErrUnknownPartition.
func (m *Manager) replica(partition string) (*replica, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.replicas[partition]; r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("partition %s on broker %d: %w", partition, m.cfg.Broker, isr.ErrUnknownPartition)
}

// Stats is what the manager counts, for metrics.
type Stats struct {
	ISRShrinks, ISRExpands int64
	// Replicas are the statuses of every replica here.
	Replicas []Status
}

// Stats returns the counters and every replica's status.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	reps := m.replicaList()
	m.mu.Unlock()
	st := Stats{ISRShrinks: m.isrShrinks.Load(), ISRExpands: m.isrExpands.Load()}
	for _, r := range reps {
		st.Replicas = append(st.Replicas, r.Status())
	}
	return st
}

// BrokerEpoch is the broker's current registration epoch.
func (m *Manager) BrokerEpoch() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.brokerEpoch
}

// Append appends records to partition through its leader's core, here, and
// returns the batch's base offset once the core acknowledges it: acks=1
// once appended, acks=all once the HW passed it (isr.ErrNotEnoughReplicas
// before appending, isr.ErrNotEnoughReplicasAfterAppend after, when the ISR
// is below min.insync.replicas), acks=0 once appended (or not), without an
// answer. isr.ErrNotLeaderOrFollower when this broker does not lead it.
// ctx's deadline bounds the acks=all wait (isr.ErrRequestTimedOut).
func (m *Manager) Append(ctx context.Context, partition string, records [][]byte, acks int8) (int64, error) {
	if len(records) == 0 {
		return -1, fmt.Errorf("append to %s: no records: %w", partition, isr.ErrInvalidRequest)
	}
	return m.AppendBatch(ctx, partition, encodeValues(records, time.Now().UnixMilli()), acks)
}

// AppendBatch is Append for one Kafka record batch (magic 2) as a producer
// sent it, stored as it is but for its base offset and leader epoch, which
// the leader stamps. isr.ErrInvalidRequest (wrapping errCorruptBatch) when
// the bytes are not one batch with a good CRC. The leader takes ownership
// of batch (it is stamped in place).
func (m *Manager) AppendBatch(ctx context.Context, partition string, batch []byte, acks int8) (int64, error) {
	count, err := checkBatch(batch)
	if err != nil {
		return -1, fmt.Errorf("append to %s: %w: %w", partition, isr.ErrInvalidRequest, err)
	}
	r, err := m.replica(partition)
	if err != nil {
		return -1, err
	}
	return r.produce(ctx, batch, count, acks)
}

// Read returns up to maxBatches whole batches of partition, from the one
// holding offset from (which may start before it, as in Kafka) up to this
// replica's HW (leader or follower), with the replica's status: each
// isr.Batch is raw (Batch.Raw: a Kafka record batch as stored).
// isr.ErrOffsetOutOfRange outside [log start, HW].
func (m *Manager) Read(ctx context.Context, partition string, from int64, maxBatches int) ([]isr.Batch, Status, error) {
	r, err := m.replica(partition)
	if err != nil {
		return nil, Status{}, err
	}
	return r.read(ctx, from, maxBatches)
}

// Status returns partition's replica status here: role, leader epoch, ISR,
// log start, HW and log end offsets.
func (m *Manager) Status(partition string) (Status, error) {
	r, err := m.replica(partition)
	if err != nil {
		return Status{}, err
	}
	return r.Status(), nil
}

// Close stops every replica (each flushes its log first), the fetchers and
// the watch, marks the shutdown clean, and ends the session, which removes
// the registration: the controller then moves leadership away.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	reps := m.replicaList()
	fetchers := m.fetchers
	m.fetchers = map[isr.BrokerID]*fetcher{}
	m.mu.Unlock()
	m.cancel()
	for _, f := range fetchers {
		f.close()
	}
	var errs []error
	for _, r := range reps {
		if err := r.close(); err != nil {
			errs = append(errs, err)
		}
	}
	m.wg.Wait()
	if len(errs) == 0 {
		if err := writeFile(m.cfg.FS, m.cfg.FS.PathJoin(m.cfg.Dir, cleanShutdownFile), nil); err != nil {
			errs = append(errs, fmt.Errorf("isrnode: mark the shutdown clean: %w", err))
		}
	}
	m.mu.Lock()
	sess := m.session
	m.mu.Unlock()
	if err := sess.Close(); err != nil && !errors.Is(err, meta.ErrClosed) {
		errs = append(errs, fmt.Errorf("isrnode: close the session: %w", err))
	}
	return errors.Join(errs...)
}

// readFile and writeFile are the small files of the manager's directory;
// writeFile syncs the file and the directory, as the marker and the loss
// epoch must survive a crash right after.
func readFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func writeFile(fs vfs.FS, path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, path); err != nil {
		return err
	}
	dir, err := fs.OpenDir(fs.PathDir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
