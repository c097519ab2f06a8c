package meta

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EtcdConfig configures an Etcd client.
type EtcdConfig struct {
	Endpoints   []string
	DialTimeout time.Duration // default 5s
	// RequestTimeout bounds each unary request whose ctx has no deadline; default 10s.
	RequestTimeout time.Duration
	// TLS, when set, makes the connections TLS (tlsconf.Client: the CA that
	// signed the members' certificates, and the client certificate members
	// started with a client CA require). Endpoints are then https:// (or
	// host:port); an http:// endpoint is refused, as clientv3 would dial it
	// in plaintext.
	TLS *tls.Config
}

// Etcd is the production Store, backed by an etcd cluster through clientv3.
type Etcd struct {
	client         *clientv3.Client
	requestTimeout time.Duration

	mu       sync.Mutex
	sessions map[*etcdSession]struct{}
	closed   bool
}

var _ Store = (*Etcd)(nil)

// NewEtcd connects to the etcd cluster at cfg.Endpoints.
func NewEtcd(cfg EtcdConfig) (*Etcd, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("meta: no etcd endpoints")
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.TLS != nil {
		for _, ep := range cfg.Endpoints {
			if strings.HasPrefix(ep, "http://") || strings.HasPrefix(ep, "unix://") {
				return nil, fmt.Errorf("meta: TLS is on but endpoint %s is not https://", ep)
			}
		}
	}
	c, err := clientv3.New(clientv3.Config{
		TLS:         cfg.TLS,
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		// Keep the client quiet; Quire logs through slog at the call sites.
		Logger: zap.NewNop(),
		// Detect a dead connection quickly so watches resume promptly.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("meta: connect to etcd %v: %w", cfg.Endpoints, err)
	}
	return &Etcd{client: c, requestTimeout: cfg.RequestTimeout, sessions: map[*etcdSession]struct{}{}}, nil
}

// Client exposes the underlying clientv3 client (for health checks and tools).
func (e *Etcd) Client() *clientv3.Client { return e.client }

func (e *Etcd) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, e.requestTimeout)
}

// wrapErr maps transport failures onto ErrUnavailable so callers can branch on it.
func wrapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("meta: %s %q: %w", op, key, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, rpctypes.ErrTimeout),
		errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail):
		return fmt.Errorf("meta: %s %q: %w: %v", op, key, ErrUnavailable, err)
	}
	if s, ok := status.FromError(err); ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded) {
		return fmt.Errorf("meta: %s %q: %w: %v", op, key, ErrUnavailable, err)
	}
	if errors.Is(err, clientv3.ErrNoAvailableEndpoints) {
		return fmt.Errorf("meta: %s %q: %w: %v", op, key, ErrUnavailable, err)
	}
	return fmt.Errorf("meta: %s %q: %w", op, key, err)
}

func (e *Etcd) Get(ctx context.Context, key string) (KV, error) {
	ctx, cancel := e.ctx(ctx)
	defer cancel()
	resp, err := e.client.Get(ctx, key)
	if err != nil {
		return KV{}, wrapErr("get", key, err)
	}
	if len(resp.Kvs) == 0 {
		return KV{}, fmt.Errorf("meta: get %q: %w", key, ErrNotFound)
	}
	kv := resp.Kvs[0]
	return KV{Key: key, Value: kv.Value, Version: Version(kv.ModRevision)}, nil
}

func (e *Etcd) Create(ctx context.Context, key string, value []byte) (Version, error) {
	return e.create(ctx, key, value, clientv3.NoLease)
}

func (e *Etcd) create(ctx context.Context, key string, value []byte, lease clientv3.LeaseID) (Version, error) {
	ctx, cancel := e.ctx(ctx)
	defer cancel()
	resp, err := e.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value), clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return 0, wrapErr("create", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("meta: create %q: %w", key, ErrExists)
	}
	return Version(resp.Header.Revision), nil
}

func (e *Etcd) Put(ctx context.Context, key string, value []byte, expected Version) (Version, error) {
	return e.put(ctx, key, value, expected, clientv3.NoLease)
}

func (e *Etcd) put(ctx context.Context, key string, value []byte, expected Version, lease clientv3.LeaseID) (Version, error) {
	ctx, cancel := e.ctx(ctx)
	defer cancel()
	resp, err := e.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", int64(expected))).
		Then(clientv3.OpPut(key, string(value), clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return 0, wrapErr("put", key, err)
	}
	if !resp.Succeeded {
		return 0, mismatch("put", key, resp)
	}
	return Version(resp.Header.Revision), nil
}

func mismatch(op, key string, resp *clientv3.TxnResponse) error {
	if len(resp.Responses) == 1 && len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
		return fmt.Errorf("meta: %s %q: %w", op, key, ErrNotFound)
	}
	return fmt.Errorf("meta: %s %q: %w", op, key, ErrBadVersion)
}

func (e *Etcd) Delete(ctx context.Context, key string, expected Version) error {
	ctx, cancel := e.ctx(ctx)
	defer cancel()
	resp, err := e.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", int64(expected))).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return wrapErr("delete", key, err)
	}
	if !resp.Succeeded {
		return mismatch("delete", key, resp)
	}
	return nil
}

func (e *Etcd) List(ctx context.Context, prefix string, opts ListOptions) (ListResult, error) {
	ctx, cancel := e.ctx(ctx)
	defer cancel()
	limit := opts.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	start := prefix
	if opts.After != "" {
		start = opts.After + "\x00"
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	resp, err := e.client.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(int64(limit)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return ListResult{}, wrapErr("list", prefix, err)
	}
	out := ListResult{More: resp.More, Revision: resp.Header.Revision, KVs: make([]KV, 0, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		out.KVs = append(out.KVs, KV{Key: string(kv.Key), Value: kv.Value, Version: Version(kv.ModRevision)})
	}
	return out, nil
}

// Watch relies on clientv3's watcher, which re-establishes the stream after a
// reconnect and resumes from the last delivered revision, so no event is lost
// or repeated across reconnects.
func (e *Etcd) Watch(ctx context.Context, prefix string, fromRevision int64) <-chan WatchResponse {
	out := make(chan WatchResponse, 16)
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if fromRevision > 0 {
		opts = append(opts, clientv3.WithRev(fromRevision))
	}
	// No WithRequireLeader: it would cancel the watch on a leader loss, and we
	// want the watch to wait out an outage and resume instead.
	wctx, cancel := context.WithCancel(ctx)
	wch := e.client.Watch(wctx, prefix, opts...)
	go func() {
		defer close(out)
		defer cancel()
		for resp := range wch {
			var r WatchResponse
			switch {
			case resp.CompactRevision != 0:
				r.Err = fmt.Errorf("meta: watch %q from %d (compacted at %d): %w", prefix, fromRevision, resp.CompactRevision, ErrCompacted)
			case resp.Err() != nil:
				r.Err = wrapErr("watch", prefix, resp.Err())
			}
			for _, ev := range resp.Events {
				me := Event{Key: string(ev.Kv.Key), Revision: ev.Kv.ModRevision}
				if ev.Type == clientv3.EventTypeDelete {
					me.Type = EventDelete
				} else {
					me.Type = EventPut
					me.Value = ev.Kv.Value
				}
				r.Events = append(r.Events, me)
			}
			if len(r.Events) == 0 && r.Err == nil {
				continue // progress notification
			}
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
			if r.Err != nil {
				return
			}
		}
	}()
	return out
}

func (e *Etcd) NewSession(ctx context.Context, ttl time.Duration) (Session, error) {
	secs := int64(math.Ceil(ttl.Seconds()))
	if secs < 1 {
		secs = 1
	}
	gctx, gcancel := e.ctx(ctx)
	grant, err := e.client.Grant(gctx, secs)
	gcancel()
	if err != nil {
		return nil, wrapErr("grant lease", "", err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	ka, err := e.client.KeepAlive(sctx, grant.ID)
	if err != nil {
		cancel()
		return nil, wrapErr("keep alive", "", err)
	}
	s := &etcdSession{store: e, lease: grant.ID, ttl: time.Duration(grant.TTL) * time.Second, cancel: cancel, done: make(chan struct{})}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		cancel()
		return nil, ErrClosed
	}
	e.sessions[s] = struct{}{}
	e.mu.Unlock()
	go func() {
		for range ka {
		}
		// The keep-alive channel closes when the lease expired (or clientv3 gave
		// up after the TTL passed without a response), or when we cancelled it.
		s.finish(ErrSessionExpired)
	}()
	return s, nil
}

func (e *Etcd) AllocateID(ctx context.Context, sequence string) (int64, error) {
	key := SequencePrefix + sequence
	for {
		kv, err := e.Get(ctx, key)
		switch {
		case errors.Is(err, ErrNotFound):
			if _, err := e.Create(ctx, key, []byte("1")); err == nil {
				return 1, nil
			} else if !errors.Is(err, ErrExists) {
				return 0, err
			}
		case err != nil:
			return 0, err
		default:
			n, perr := strconv.ParseInt(string(kv.Value), 10, 64)
			if perr != nil {
				return 0, fmt.Errorf("meta: sequence %q holds %q: %w", sequence, kv.Value, perr)
			}
			if _, err := e.Put(ctx, key, []byte(strconv.FormatInt(n+1, 10)), kv.Version); err == nil {
				return n + 1, nil
			} else if !errors.Is(err, ErrBadVersion) && !errors.Is(err, ErrNotFound) {
				return 0, err
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
}

func (e *Etcd) Close() error {
	e.mu.Lock()
	e.closed = true
	sessions := make([]*etcdSession, 0, len(e.sessions))
	for s := range e.sessions {
		sessions = append(sessions, s)
	}
	e.mu.Unlock()
	for _, s := range sessions {
		s.Close()
	}
	return e.client.Close()
}

type etcdSession struct {
	store  *Etcd
	lease  clientv3.LeaseID
	ttl    time.Duration
	cancel context.CancelFunc

	once sync.Once
	err  error
	done chan struct{}
}

func (s *etcdSession) ID() int64          { return int64(s.lease) }
func (s *etcdSession) TTL() time.Duration { return s.ttl }
func (s *etcdSession) Done() <-chan struct{} {
	return s.done
}

func (s *etcdSession) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

func (s *etcdSession) finish(err error) {
	s.once.Do(func() {
		s.err = err
		s.cancel()
		close(s.done)
		s.store.mu.Lock()
		delete(s.store.sessions, s)
		s.store.mu.Unlock()
	})
}

func (s *etcdSession) CreateEphemeral(ctx context.Context, key string, value []byte) (Version, error) {
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("meta: create ephemeral %q: %w", key, err)
	}
	return s.store.create(ctx, key, value, s.lease)
}

func (s *etcdSession) PutEphemeral(ctx context.Context, key string, value []byte, expected Version) (Version, error) {
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("meta: put ephemeral %q: %w", key, err)
	}
	return s.store.put(ctx, key, value, expected, s.lease)
}

func (s *etcdSession) Close() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	s.finish(ErrClosed)
	ctx, cancel := context.WithTimeout(context.Background(), s.store.requestTimeout)
	defer cancel()
	if _, err := s.store.client.Revoke(ctx, s.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return wrapErr("revoke lease", "", err)
	}
	return nil
}

func clientv3LeaseID(id int64) clientv3.LeaseID { return clientv3.LeaseID(id) }
