package server

import (
	"bufio"
	"encoding/binary"
	"net"

	"google.golang.org/protobuf/encoding/protowire"

	"quire/internal/bookie/wire"
)

// A batch read's answer is the one response that carries megabytes: a catch-up reader asks
// for ranges of 4 MiB. Encoding it with protobuf copies every payload into a fresh frame
// buffer (zeroed by the runtime first), only for the frame to be copied again into the
// socket. Instead the writer encodes everything around the payloads by hand — byte for
// byte what proto.Marshal produces for the same Response (TestBatchReadEncoding) — and
// hands the pieces and the payloads, in place, to one writev; then the engine may reuse the
// payloads' memory (Engine.ReadRange's release).

// batchReadAnswer is an OK answer to a batch read, waiting for the writer.
type batchReadAnswer struct {
	requestID uint64
	entries   []Entry
	release   func() // may be nil
}

func (a *batchReadAnswer) done() {
	if a.release != nil {
		a.release()
		a.release = nil
	}
}

// entrySize is the size of e encoded as a wire.Entry message.
func entrySize(e Entry) int {
	n := 0
	if e.LedgerID != 0 {
		n += 1 + protowire.SizeVarint(uint64(e.LedgerID))
	}
	if e.EntryID != 0 {
		n += 1 + protowire.SizeVarint(uint64(e.EntryID))
	}
	if e.LastAddConfirmed != 0 {
		n += 1 + protowire.SizeVarint(uint64(e.LastAddConfirmed))
	}
	if len(e.Payload) > 0 {
		n += protowire.SizeBytes(len(e.Payload)) + 1
	}
	return n
}

// entryFieldSize is what e adds to a BatchReadResponse (its field tag, length and message).
func entryFieldSize(e Entry) int {
	n := entrySize(e)
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

// appendBatchReadFrame appends the frame of a's response without the payloads: after the
// bytes up to cuts[i] comes entry i's payload. Nothing follows the last payload (a payload
// is the last field of an entry, an entry the last field of the response).
func appendBatchReadFrame(dst []byte, cuts []int, a *batchReadAnswer) ([]byte, []int) {
	body := 0
	for _, e := range a.entries {
		body += entryFieldSize(e)
	}
	size := 1 + protowire.SizeVarint(uint64(wire.Status_OK)) + 1 + protowire.SizeVarint(uint64(body)) + body
	if a.requestID != 0 {
		size += 1 + protowire.SizeVarint(a.requestID)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	if a.requestID != 0 {
		dst = protowire.AppendTag(dst, 1, protowire.VarintType)
		dst = protowire.AppendVarint(dst, a.requestID)
	}
	dst = protowire.AppendTag(dst, 2, protowire.VarintType)
	dst = protowire.AppendVarint(dst, uint64(wire.Status_OK))
	dst = protowire.AppendTag(dst, 7, protowire.BytesType) // Response.batch_read
	dst = protowire.AppendVarint(dst, uint64(body))
	for _, e := range a.entries {
		dst = protowire.AppendTag(dst, 1, protowire.BytesType) // BatchReadResponse.entries
		dst = protowire.AppendVarint(dst, uint64(entrySize(e)))
		if e.LedgerID != 0 {
			dst = protowire.AppendTag(dst, 1, protowire.VarintType)
			dst = protowire.AppendVarint(dst, uint64(e.LedgerID))
		}
		if e.EntryID != 0 {
			dst = protowire.AppendTag(dst, 2, protowire.VarintType)
			dst = protowire.AppendVarint(dst, uint64(e.EntryID))
		}
		if e.LastAddConfirmed != 0 {
			dst = protowire.AppendTag(dst, 3, protowire.VarintType)
			dst = protowire.AppendVarint(dst, uint64(e.LastAddConfirmed))
		}
		if len(e.Payload) > 0 {
			dst = protowire.AppendTag(dst, 4, protowire.BytesType)
			dst = protowire.AppendVarint(dst, uint64(len(e.Payload)))
		}
		cuts = append(cuts, len(dst))
	}
	return dst, cuts
}

// writeBatchRead writes a's frame: a small one through bw like any response, a large one
// with one writev of the encoded pieces and the payloads in place (after flushing bw, so
// responses stay in order). It returns heads and cuts for reuse; a is done either way.
func writeBatchRead(bw *bufio.Writer, nc net.Conn, heads []byte, cuts []int, a *batchReadAnswer) ([]byte, []int, error) {
	defer a.done()
	heads, cuts = appendBatchReadFrame(heads[:0], cuts[:0], a)
	total := len(heads)
	for _, e := range a.entries {
		total += len(e.Payload)
	}
	if total <= bw.Available() || total < ioBufferBytes {
		from := 0
		for i, e := range a.entries {
			bw.Write(heads[from:cuts[i]])
			bw.Write(e.Payload)
			from = cuts[i]
		}
		_, err := bw.Write(heads[from:])
		return heads, cuts, err
	}
	if err := bw.Flush(); err != nil {
		return heads, cuts, err
	}
	bufs := make(net.Buffers, 0, 2*len(a.entries)+1)
	from := 0
	for i, e := range a.entries {
		bufs = append(bufs, heads[from:cuts[i]])
		if len(e.Payload) > 0 {
			bufs = append(bufs, e.Payload)
		}
		from = cuts[i]
	}
	if from < len(heads) {
		bufs = append(bufs, heads[from:])
	}
	_, err := bufs.WriteTo(nc)
	return heads, cuts, err
}
