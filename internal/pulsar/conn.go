package pulsar

// The connection, and CONNECT, PING/PONG, LOOKUP, PARTITIONED_METADATA.
//
// Deviations from Apache Pulsar:
//   - Authentication and authorization (auth.go) only when the Server has
//     an Authenticator; otherwise CONNECT's auth fields are ignored and
//     every client is accepted.
//   - CONNECTED advertises no feature flags (no broker-entry metadata, no
//     topic-list watchers) and protocol version min(client's, 20).
//   - LOOKUP is always answered authoritatively, Connect or Redirect (never
//     proxy_through_service_url); the TLS URL (brokerServiceUrlTls) is
//     advertised when the broker has a TLS listener.
//   - Commands not served here (schemas, transactions, topic listing, stats,
//     topic watchers) are answered with ERROR NotAllowedError when they
//     carry a request id, and ignored otherwise.

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "quire/internal/pulsar/pulsarpb"
)

// conn is one client connection.
type conn struct {
	s      *Server
	nc     net.Conn
	remote string
	// clientVersion is what CONNECT said (stats' clientVersion); set
	// before any producer or consumer exists, never changed.
	clientVersion string
	ctx           context.Context // canceled when the connection closes
	cancel        context.CancelFunc
	// out is the writer's queue of encoded frames; its capacity is the
	// bound (Config.OutboundFrames).
	out chan []byte
	// sendSlots bounds SENDs appended and not yet answered; a slot is
	// taken by the reader and given back by the writer once the receipt
	// is written.
	sendSlots chan struct{}
	// receiptsReady wakes the writer when receipts are queued.
	receiptsReady chan struct{}
	receiptsMu    sync.Mutex
	receipts      [][]byte // each holds one send slot

	// lastReceived is when the last frame arrived (unix nanoseconds), for
	// the keep-alive.
	lastReceived atomic.Int64
	abortOnce    sync.Once

	// Reader-owned: the handshake state.
	connected       bool
	protocolVersion int32
	// closing: the reader stopped after queueing a last answer
	// (sendAndClose); the connection closes once the writer sent it.
	closing bool

	// Set by the reader at CONNECT (auth.go), before authExpiry is stored,
	// and never changed after: role is who the client is ("" without
	// authentication), authMethod the provider that said so ("" for the
	// anonymous role), authRefresh whether the client answers
	// AUTH_CHALLENGE.
	role        string
	authMethod  string
	authRefresh bool
	// authExpiry is when the credentials expire (unix nanoseconds, 0:
	// never); challengeSent when the AUTH_CHALLENGE for them went out (0:
	// none outstanding). The reader stores, the writer checks.
	authExpiry    atomic.Int64
	challengeSent atomic.Int64

	// mu guards producers and consumers: the reader adds and removes them,
	// a seek on another connection closes consumers here.
	mu        sync.Mutex
	producers map[uint64]*producer
	// waiting are this connection's WaitForExclusive producers still queued
	// (producer.go), by producer id; guarded by mu.
	waiting   map[uint64]*producer
	consumers map[uint64]*consumer
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(s.ctx)
	c := &conn{
		s:             s,
		nc:            nc,
		remote:        nc.RemoteAddr().String(),
		ctx:           ctx,
		cancel:        cancel,
		out:           make(chan []byte, s.outboundFrames),
		sendSlots:     make(chan struct{}, s.maxPendingSends),
		receiptsReady: make(chan struct{}, 1),
		producers:     make(map[uint64]*producer),
		waiting:       make(map[uint64]*producer),
		consumers:     make(map[uint64]*consumer),
	}
	c.lastReceived.Store(time.Now().UnixNano())
	return c
}

// abort closes the connection at once.
func (c *conn) abort() {
	c.abortOnce.Do(func() {
		c.cancel()
		c.nc.Close()
	})
}

func (c *conn) serve() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	c.readLoop()
	if c.closing {
		// Let the writer send the last answer, within a bound: a client
		// that reads nothing must not hold the connection.
		linger := time.NewTimer(closeLinger)
		select {
		case <-writerDone:
		case <-linger.C:
		}
		linger.Stop()
	}
	c.abort()
	<-writerDone
	c.cleanup()
}

// cleanup releases what the connection held: its producers leave their
// topics, its consumers their subscriptions (their unacknowledged messages
// go back for redelivery).
func (c *conn) cleanup() {
	c.mu.Lock()
	producers, consumers := c.producers, c.consumers
	c.producers, c.consumers = map[uint64]*producer{}, map[uint64]*consumer{}
	c.mu.Unlock()
	for _, p := range producers {
		p.ts.removeProducer(p)
	}
	for _, cons := range consumers {
		cons.sub.removeConsumer(cons)
	}
}

func (c *conn) readLoop() {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		f, err := ReadFrame(br, c.s.maxFrameBytes)
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), c.ctx.Err() != nil:
			case errors.Is(err, ErrFrameTooLarge), errors.Is(err, errMalformed):
				c.s.log.Warn("bad frame; closing connection", "remote", c.remote, "err", err)
			default:
				c.s.log.Debug("connection read failed", "remote", c.remote, "err", err)
			}
			return
		}
		c.lastReceived.Store(time.Now().UnixNano())
		if err := c.handle(f); err != nil {
			if errors.Is(err, errClosing) {
				c.closing = true
			} else {
				c.s.log.Warn("closing connection", "remote", c.remote, "err", err)
			}
			return
		}
	}
}

// handle serves one frame; an error closes the connection.
func (c *conn) handle(f *Frame) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.s.log.Error("panic handling a command", "panic", r, "stack", string(debug.Stack()))
			err = errors.New("panic handling a command")
		}
	}()
	cmd := f.Cmd
	if !c.connected && cmd.GetType() != pb.BaseCommand_CONNECT {
		return errors.New("command before CONNECT: " + cmd.GetType().String())
	}
	switch cmd.GetType() {
	case pb.BaseCommand_CONNECT:
		return c.handleConnect(cmd.GetConnect())
	case pb.BaseCommand_PING:
		return c.send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
	case pb.BaseCommand_PONG:
		return nil // lastReceived is all a PONG is for
	case pb.BaseCommand_AUTH_RESPONSE:
		return c.handleAuthResponse(cmd.GetAuthResponse())
	case pb.BaseCommand_LOOKUP:
		return c.handleLookup(cmd.GetLookupTopic())
	case pb.BaseCommand_PARTITIONED_METADATA:
		return c.handlePartitionedMetadata(cmd.GetPartitionMetadata())
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		return c.handleTopicsOfNamespace(cmd.GetGetTopicsOfNamespace())
	case pb.BaseCommand_PRODUCER:
		return c.handleProducer(cmd.GetProducer())
	case pb.BaseCommand_SEND:
		return c.handleSend(cmd.GetSend(), f)
	case pb.BaseCommand_CLOSE_PRODUCER:
		return c.handleCloseProducer(cmd.GetCloseProducer())
	case pb.BaseCommand_SUBSCRIBE:
		return c.handleSubscribe(cmd.GetSubscribe())
	case pb.BaseCommand_FLOW:
		return c.handleFlow(cmd.GetFlow())
	case pb.BaseCommand_ACK:
		return c.handleAck(cmd.GetAck())
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		return c.handleRedeliver(cmd.GetRedeliverUnacknowledgedMessages())
	case pb.BaseCommand_GET_LAST_MESSAGE_ID:
		return c.handleGetLastMessageID(cmd.GetGetLastMessageId())
	case pb.BaseCommand_SEEK:
		return c.handleSeek(cmd.GetSeek())
	case pb.BaseCommand_UNSUBSCRIBE:
		return c.handleUnsubscribe(cmd.GetUnsubscribe())
	case pb.BaseCommand_CLOSE_CONSUMER:
		return c.handleCloseConsumer(cmd.GetCloseConsumer())
	case pb.BaseCommand_GET_SCHEMA:
		return c.handleGetSchema(cmd.GetGetSchema())
	case pb.BaseCommand_GET_OR_CREATE_SCHEMA:
		return c.handleGetOrCreateSchema(cmd.GetGetOrCreateSchema())
	default:
		return c.unsupported(cmd)
	}
}

// unsupported answers a command this front end does not serve: with an
// ERROR naming its request id when it has one (the client fails that
// request and goes on), else by ignoring it, as Pulsar ignores commands it
// does not know.
func (c *conn) unsupported(cmd *pb.BaseCommand) error {
	c.s.log.Debug("unsupported command", "remote", c.remote, "type", cmd.GetType().String())
	if id, ok := requestID(cmd); ok {
		return c.sendError(id, ErrNotAllowed, "command "+cmd.GetType().String()+" is not supported by this broker")
	}
	return nil
}

// requestID finds the request_id of whichever command BaseCommand carries.
func requestID(cmd *pb.BaseCommand) (uint64, bool) {
	var id uint64
	var found bool
	cmd.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind {
			return true
		}
		m := v.Message()
		if f := m.Descriptor().Fields().ByName("request_id"); f != nil && m.Has(f) && f.Kind() == protoreflect.Uint64Kind {
			id, found = m.Get(f).Uint(), true
			return false
		}
		return true
	})
	return id, found
}

// send queues a command for the writer, waiting while the queue is full.
func (c *conn) send(cmd *pb.BaseCommand) error {
	return c.sendFrame(AppendCommand(nil, cmd))
}

// errClosing ends the reader after sendAndClose.
var errClosing = errors.New("closing after the last answer")

// closeLinger bounds how long a closing connection waits for its writer to
// send the last answer.
const closeLinger = 5 * time.Second

// sendAndClose queues a last command and a nil frame, on which the writer
// flushes and stops; it returns errClosing, which stops the reader.
func (c *conn) sendAndClose(cmd *pb.BaseCommand) error {
	if err := c.send(cmd); err != nil {
		return err
	}
	if err := c.sendFrame(nil); err != nil {
		return err
	}
	return errClosing
}

// sendFrame queues a frame; nil is sendAndClose's end mark.
func (c *conn) sendFrame(frame []byte) error {
	select {
	case c.out <- frame:
		return nil
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
}

// sendError answers a request with an ERROR carrying err's code.
func (c *conn) sendError(requestID uint64, err error, msg string) error {
	code := c.errorCode(err, "request", requestID)
	if msg == "" {
		msg = err.Error()
	}
	return c.send(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
		RequestId: proto.Uint64(requestID),
		Error:     code.Enum(),
		Message:   proto.String(msg),
	}})
}

// errorCode maps an error to its ServerError, logging the unknown ones.
func (c *conn) errorCode(err error, op string, args ...any) pb.ServerError {
	code, known := serverError(err)
	if !known {
		c.s.log.Error("backend error", append([]any{"op", op, "remote", c.remote, "err", err}, args...)...)
	}
	return code
}

// queueReceipt hands the writer a receipt frame; its caller holds a send
// slot that the writer gives back. It never blocks (the slots bound the
// list), so Topic.Append's completions may call it.
func (c *conn) queueReceipt(frame []byte) {
	c.receiptsMu.Lock()
	c.receipts = append(c.receipts, frame)
	c.receiptsMu.Unlock()
	select {
	case c.receiptsReady <- struct{}{}:
	default:
	}
}

func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	keepAlive := time.NewTicker(c.s.keepAlive)
	defer keepAlive.Stop()
	var pingSent int64 // unix nanoseconds of the PING not yet answered, 0 when none
	write := func(frame []byte) bool {
		if _, err := bw.Write(frame); err != nil {
			c.abort()
			return false
		}
		return true
	}
	for {
		select {
		case <-c.ctx.Done():
			return
		case frame := <-c.out:
			if frame == nil { // sendAndClose's end mark
				_ = bw.Flush()
				return
			}
			if !write(frame) {
				return
			}
		case <-c.receiptsReady:
			c.receiptsMu.Lock()
			receipts := c.receipts
			c.receipts = nil
			c.receiptsMu.Unlock()
			for _, r := range receipts {
				<-c.sendSlots
				if !write(r) {
					return
				}
			}
		case now := <-keepAlive.C:
			if !c.checkAuthExpiry(now, write) {
				c.abort()
				return
			}
			if pingSent != 0 && c.lastReceived.Load() < pingSent {
				c.s.log.Info("client did not answer a ping; closing connection", "remote", c.remote)
				c.abort()
				return
			}
			pingSent = 0
			if now.UnixNano()-c.lastReceived.Load() >= int64(c.s.keepAlive)/2 {
				pingSent = now.UnixNano()
				if !write(AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})) {
					return
				}
			}
		}
		// Flush once nothing else is ready: a burst goes out in few writes,
		// and nothing waits in the buffer behind an idle queue.
		if len(c.out) == 0 && len(c.receiptsReady) == 0 {
			if err := bw.Flush(); err != nil {
				c.abort()
				return
			}
		}
	}
}

// handleConnect answers CONNECT with CONNECTED: the protocol version is
// the lower of the client's and ours.
func (c *conn) handleConnect(cmd *pb.CommandConnect) error {
	if c.connected {
		return errors.New("second CONNECT")
	}
	c.connected = true
	c.protocolVersion = min(cmd.GetProtocolVersion(), maxProtocolVersion)
	c.clientVersion = cmd.GetClientVersion()
	if err := c.authenticate(cmd); err != nil {
		return c.refuseConnect(err)
	}
	return c.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
		ServerVersion:   proto.String(ServerVersion),
		ProtocolVersion: proto.Int32(c.protocolVersion),
		MaxMessageSize:  proto.Int32(int32(c.s.maxMessageSize)),
		FeatureFlags:    &pb.FeatureFlags{},
	}})
}

// handleLookup answers LOOKUP authoritatively: Connect with this broker's
// URL when it owns the topic, Redirect to the owner's otherwise.
func (c *conn) handleLookup(cmd *pb.CommandLookupTopic) error {
	resp := &pb.CommandLookupTopicResponse{RequestId: proto.Uint64(cmd.GetRequestId())}
	var res LookupResult
	err := c.authorizeTopic(cmd.GetTopic(), ActionLookup)
	if err == nil {
		res, err = c.s.backend.Lookup(c.ctx, CanonicalTopic(cmd.GetTopic()))
	}
	switch {
	case err != nil:
		resp.Response = pb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error = c.errorCode(err, "lookup", "topic", cmd.GetTopic()).Enum()
		resp.Message = proto.String(err.Error())
	case res.OwnerURL == "" || res.OwnerURL == c.s.URL():
		resp.Response = pb.CommandLookupTopicResponse_Connect.Enum()
		resp.BrokerServiceUrl = proto.String(c.s.URL())
		if tlsURL := c.s.TLSURL(); tlsURL != "" {
			resp.BrokerServiceUrlTls = proto.String(tlsURL)
		}
		resp.Authoritative = proto.Bool(true)
	default:
		resp.Response = pb.CommandLookupTopicResponse_Redirect.Enum()
		resp.BrokerServiceUrl = proto.String(res.OwnerURL)
		if res.OwnerTLSURL != "" {
			resp.BrokerServiceUrlTls = proto.String(res.OwnerTLSURL)
		}
		resp.Authoritative = proto.Bool(true)
	}
	return c.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp})
}

func (c *conn) handlePartitionedMetadata(cmd *pb.CommandPartitionedTopicMetadata) error {
	resp := &pb.CommandPartitionedTopicMetadataResponse{RequestId: proto.Uint64(cmd.GetRequestId())}
	var n int
	err := c.authorizeTopic(cmd.GetTopic(), ActionLookup)
	if err == nil {
		n, err = c.s.backend.PartitionedMetadata(c.ctx, CanonicalTopic(cmd.GetTopic()))
	}
	if err != nil {
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Failed.Enum()
		resp.Error = c.errorCode(err, "partitioned metadata", "topic", cmd.GetTopic()).Enum()
		resp.Message = proto.String(err.Error())
	} else {
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Success.Enum()
		resp.Partitions = proto.Uint32(uint32(n))
	}
	return c.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: resp})
}

// handleTopicsOfNamespace answers a pattern consumer's listing. Every topic
// here is persistent, so NON_PERSISTENT lists none. The client filters by
// its pattern (the answer is not Filtered) and gets the whole list each time
// (no topics hash).
func (c *conn) handleTopicsOfNamespace(cmd *pb.CommandGetTopicsOfNamespace) error {
	var topics []string
	if err := c.authorize(cmd.GetNamespace(), ActionLookup); err != nil {
		return c.sendError(cmd.GetRequestId(), err, "")
	}
	if cmd.GetMode() != pb.CommandGetTopicsOfNamespace_NON_PERSISTENT {
		var err error
		if topics, err = c.s.backend.TopicsOfNamespace(c.ctx, cmd.GetNamespace()); err != nil {
			return c.sendError(cmd.GetRequestId(), err, "topics of namespace "+cmd.GetNamespace())
		}
	}
	return c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(),
		GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{RequestId: proto.Uint64(cmd.GetRequestId()), Topics: topics}})
}

func (c *conn) sendSuccess(requestID uint64) error {
	return c.send(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(requestID)}})
}
