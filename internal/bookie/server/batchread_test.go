package server

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"net"
	"testing"

	"google.golang.org/protobuf/proto"

	"quire/internal/bookie/wire"
)

// TestBatchReadEncoding: the hand-encoded batch read response, payloads put back at the
// cuts, is byte for byte the frame proto.Marshal gives for the same Response, for ids and
// LACs at their edges (0 is omitted, -1 takes ten bytes) and empty payloads; and what
// writeBatchRead sends, through the buffer or with writev, is that frame.
func TestBatchReadEncoding(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB: the writev path
	for _, tc := range []struct {
		name      string
		requestID uint64
		entries   []Entry
	}{
		{"no entries", 7, nil},
		{"request id 0", 0, []Entry{{LedgerID: 1, EntryID: 2, LastAddConfirmed: 1, Payload: []byte("x")}}},
		{"zero fields", 1, []Entry{{}, {Payload: []byte("p")}}},
		{"edges", math.MaxUint64, []Entry{
			{LedgerID: math.MaxInt64, EntryID: math.MaxInt64, LastAddConfirmed: -1, Payload: []byte("a")},
			{LedgerID: 3, EntryID: 0, LastAddConfirmed: 0},
			{LedgerID: 3, EntryID: 200, LastAddConfirmed: 127, Payload: bytes.Repeat([]byte("b"), 300)},
		}},
		{"large", 99, []Entry{{LedgerID: 5, EntryID: 10, LastAddConfirmed: 9, Payload: big}, {LedgerID: 5, EntryID: 11, LastAddConfirmed: 9, Payload: big}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &wire.BatchReadResponse{}
			for _, e := range tc.entries {
				body.Entries = append(body.Entries, &wire.Entry{LedgerId: e.LedgerID, EntryId: e.EntryID, LastAddConfirmed: e.LastAddConfirmed, Payload: e.Payload})
			}
			want, err := wire.AppendFrame(nil, &wire.Response{RequestId: tc.requestID, Status: wire.Status_OK,
				Body: &wire.Response_BatchRead{BatchRead: body}})
			if err != nil {
				t.Fatal(err)
			}
			a := &batchReadAnswer{requestID: tc.requestID, entries: tc.entries}
			heads, cuts := appendBatchReadFrame(nil, nil, a)
			var got []byte
			from := 0
			for i, e := range tc.entries {
				got = append(append(got, heads[from:cuts[i]]...), e.Payload...)
				from = cuts[i]
			}
			got = append(got, heads[from:]...)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoded\n%x\nproto.Marshal\n%x", got, want)
			}
			for i, e := range tc.entries {
				n := proto.Size(body.Entries[i])
				if entrySize(e) != n {
					t.Fatalf("entry %d: size %d, proto.Size %d", i, entrySize(e), n)
				}
			}

			// Over a connection: buffered, or with writev once it is large.
			client, srv := net.Pipe()
			defer client.Close()
			released := false
			a.release = func() { released = true }
			errs := make(chan error, 1)
			go func() {
				bw := bufio.NewWriterSize(srv, ioBufferBytes)
				_, _, err := writeBatchRead(bw, srv, nil, nil, a)
				if err == nil {
					err = bw.Flush()
				}
				errs <- err
				srv.Close()
			}()
			sent := make([]byte, len(want))
			if _, err := io.ReadFull(client, sent); err != nil {
				t.Fatal(err)
			}
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(sent, want) || !released {
				t.Fatalf("sent %d bytes equal to the frame: %v; released %v", len(sent), bytes.Equal(sent, want), released)
			}
		})
	}
}
