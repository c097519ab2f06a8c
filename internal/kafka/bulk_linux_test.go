package kafka

import (
	"bytes"
	"net"
	"testing"

	"quire/internal/lowprio"
)

// niceConn records the nice value of the thread each Write runs on.
type niceConn struct {
	net.Conn
	buf   bytes.Buffer
	nices []int
}

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
