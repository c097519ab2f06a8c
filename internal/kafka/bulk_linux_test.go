package kafka

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"quire/internal/lowprio"
)

// niceConn records the nice value of the thread each Write runs on.
type niceConn struct {
	net.Conn
	buf   bytes.Buffer
	nices []int
}

func (c *niceConn) SetWriteDeadline(time.Time) error { return nil }

func (c *niceConn) Write(p []byte) (int, error) {
	nice, err := lowprio.CurrentNice()
	if err != nil {
		return 0, err
	}
	c.nices = append(c.nices, nice)
	return c.buf.Write(p)
}

// A response of bulkResponseBytes or more is written on the bulk pool's
// low-priority threads, a smaller one on the writer's own; both whole and in
// order.
func TestLargeResponsesAreWrittenAsBulk(t *testing.T) {
	pool := lowprio.New(1)
	defer pool.Close()
	nc := &niceConn{}
	c := &conn{s: &Server{bulk: pool}, nc: nc}

	small := [][]byte{[]byte("head"), bytes.Repeat([]byte{1}, 1000)}
	large := [][]byte{[]byte("head"), bytes.Repeat([]byte{2}, bulkResponseBytes/2), bytes.Repeat([]byte{3}, bulkResponseBytes/2)}
	// Writing consumes the pieces (net.Buffers).
	want := append(bytes.Join(small, nil), bytes.Join(large, nil)...)
	large2 := append([][]byte(nil), large...)
	if err := c.writePieces(small); err != nil {
		t.Fatal(err)
	}
	for _, n := range nc.nices {
		if n == lowprio.Nice {
			t.Fatalf("a %d-byte response was written at nice %d", 1004, n)
		}
	}
	smallWrites := len(nc.nices)

	if err := c.writePieces(large); err != nil {
		t.Fatal(err)
	}
	for _, n := range nc.nices[smallWrites:] {
		if n != lowprio.Nice {
			t.Fatalf("a %d-byte response was written at nice %d, want %d", bulkResponseBytes+4, n, lowprio.Nice)
		}
	}
	if !bytes.Equal(nc.buf.Bytes(), want) {
		t.Fatalf("wrote %d bytes, not the %d of both responses in order", nc.buf.Len(), len(want))
	}

	// Without a pool, everything is written on the writer's thread.
	nc2 := &niceConn{}
	c2 := &conn{s: &Server{}, nc: nc2}
	if err := c2.writePieces(large2); err != nil {
		t.Fatal(err)
	}
	for _, n := range nc2.nices {
		if n == lowprio.Nice {
			t.Fatal("written at the pool's nice without a pool")
		}
	}
}

// A client that does not read keeps a large response's write on the bulk
// pool for at most bulkWriteWait: the rest waits for it on the connection's
// own goroutine, and the pool's one thread is free for other work meanwhile.
func TestSlowReaderDoesNotHoldTheBulkPool(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	pool := lowprio.New(1)
	defer pool.Close()
	c := &conn{s: &Server{bulk: pool}, nc: server}
	const size = 64 << 20 // far more than the sockets' buffers hold
	payload := bytes.Repeat([]byte{7}, size)
	written := make(chan error, 1)
	go func() { written <- c.writePieces([][]byte{payload[:size/2], payload[size/2:]}) }()

	// The client reads nothing until the pool has run another job: Do
	// returns only once the pool's one thread is free of the write.
	pool.Do(func() {})
	n, err := io.Copy(io.Discard, io.LimitReader(client, size))
	if err != nil || n != size {
		t.Fatalf("client read %d of %d bytes: %v", n, size, err)
	}
	if err := <-written; err != nil {
		t.Fatalf("write: %v", err)
	}
}
