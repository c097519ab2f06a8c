package kafka_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
)

// cluster is one Server over an in-memory Backend, listening on loopback.
type cluster struct {
	t       *testing.T
	backend *kafkatest.Backend
	server  *kafka.Server
	addr    string
	reg     *prometheus.Registry
}

func newCluster(t *testing.T, tweak ...func(*kafka.Config)) *cluster {
	t.Helper()
	return newClusterOn(t, nil, tweak...)
}

// newClusterOn is newCluster with the listener wrapped by wrap (TLS, a
// *kafka.Listener with security); nil wraps nothing.
func newClusterOn(t *testing.T, wrap func(net.Listener) net.Listener, tweak ...func(*kafka.Config)) *cluster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, portStr, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portStr)
	backend := kafkatest.New(kafka.Node{ID: 1, Host: host, Port: int32(port)})
	reg := prometheus.NewRegistry()
	cfg := kafka.Config{
		Backend:    backend,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: reg,
	}
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	for _, f := range tweak {
		f(&cfg)
	}
	server, err := kafka.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	go func() { served <- server.Serve(ln) }()
	t.Cleanup(func() {
		server.Close()
		if err := <-served; !errors.Is(err, kafka.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return &cluster{t: t, backend: backend, server: server, addr: addr, reg: reg}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func (c *cluster) client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.addr), kgo.RetryTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

func (c *cluster) admin() *kadm.Client { return kadm.NewClient(c.client()) }

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rawConn speaks the protocol by hand (through kmsg) for tests that need
// exact versions, pipelining, or to see the connection close.
type rawConn struct {
	t      *testing.T
	nc     net.Conn
	br     *bufio.Reader
	corrID int32
}

func (c *cluster) raw() *rawConn {
	c.t.Helper()
	nc, err := net.Dial("tcp", c.addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { nc.Close() })
	return &rawConn{t: c.t, nc: nc, br: bufio.NewReader(nc)}
}

// send writes a request and returns its correlation id.
func (r *rawConn) send(req kmsg.Request) int32 {
	r.t.Helper()
	r.corrID++
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, r.corrID)
	if _, err := r.nc.Write(frame); err != nil {
		r.t.Fatalf("write: %v", err)
	}
	return r.corrID
}

// recv reads the response to req (sent with correlation id corrID).
func (r *rawConn) recv(req kmsg.Request, corrID int32) kmsg.Response {
	r.t.Helper()
	body, err := r.readFrame()
	if err != nil {
		r.t.Fatalf("read response to %T: %v", req, err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corrID {
		r.t.Fatalf("response correlation id %d, want %d", got, corrID)
	}
	body = body[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != int16(kmsg.ApiVersions) {
		if len(body) == 0 || body[0] != 0 {
			r.t.Fatalf("flexible response header tags: %x", body[:min(len(body), 4)])
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		r.t.Fatalf("decode %T: %v", resp, err)
	}
	return resp
}

func (r *rawConn) request(req kmsg.Request) kmsg.Response {
	r.t.Helper()
	return r.recv(req, r.send(req))
}

func (r *rawConn) readFrame() ([]byte, error) {
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(r.br, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(r.br, body)
	return body, err
}

// expectClosed asserts the server closes the connection (EOF or reset)
// without sending anything more.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var buf [1]byte
	n, err := r.br.Read(buf[:])
	if err == nil {
		r.t.Fatalf("read %d bytes, want the connection closed", n)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		r.t.Fatal("connection still open after 10s")
	}
}

// record builds a valid produce batch with n records via kgo's own
// encoding, so tests need not hand-encode batches.
func recordBatch(t *testing.T, n int, value string) []byte {
	t.Helper()
	return buildBatch(n, value, time.Now().UnixMilli())
}

func buildBatch(n int, value string, ts int64) []byte {
	var records []byte
	for i := range n {
		rec := kmsg.NewRecord()
		rec.OffsetDelta = int32(i)
		rec.Value = []byte(fmt.Sprintf("%s-%d", value, i))
		rec.Length = int32(len(rec.AppendTo(nil)) - 1) // all after the 1-byte varint 0
		records = rec.AppendTo(records)
	}
	b := kmsg.NewRecordBatch()
	b.Magic = 2
	b.LastOffsetDelta = int32(n - 1)
	b.FirstTimestamp, b.MaxTimestamp = ts, ts
	b.ProducerID, b.ProducerEpoch, b.FirstSequence = -1, -1, -1
	b.NumRecords = int32(n)
	b.Records = records
	raw := b.AppendTo(nil)
	// Length and CRC: kmsg leaves them as set; fix them up like a producer.
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}
