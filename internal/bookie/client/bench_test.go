package client_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"quire/internal/bookie/client"
	"quire/internal/bookie/server"
)

const (
	benchPayloadBytes = 1 << 10
	benchInFlight     = 256
)

// nopEngine acknowledges every add at once and stores nothing: the benchmark measures the
// protocol path (encode, loopback TCP, decode, dispatch, respond), not storage.
type nopEngine struct{}

func (nopEngine) Add(_ server.AddRequest, done func(error)) { done(nil) }
func (nopEngine) Read(int64, int64) (server.Entry, error)   { return server.Entry{}, nil }
func (nopEngine) ReadRange(int64, int64, int, int) ([]server.Entry, func(), error) {
	return nil, nil, nil
}
func (nopEngine) Fence(int64) (int64, error)                         { return -1, nil }
func (nopEngine) WatchLAC(int64, int64, func(int64)) (func(), error) { return func() {}, nil }
func (nopEngine) WriteLAC(_, lac int64) (int64, error)               { return lac, nil }
func (nopEngine) DeleteLedger(int64) error                           { return nil }
func (nopEngine) Info() (uint64, uint64, bool)                       { return 0, 0, false }

// BenchmarkPipelinedAdds: 1 KiB adds over loopback with 256 in flight, against an engine
// that acknowledges at once. Reports entries/s (MB/s counts payload bytes) and, as
// raw_tcp_ratio, the protocol's time over the time a bare loopback exchange of the same
// frames takes in the same run (1.0 would mean the protocol costs nothing).
func BenchmarkPipelinedAdds(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := server.New(server.Config{Logger: quiet}, nopEngine{})
	go srv.Serve(ln)
	defer srv.Close()
	c := client.New(client.Config{Logger: quiet, MaxInFlightPerConn: benchInFlight})
	defer c.Close()
	addr := ln.Addr().String()
	payload := bytes.Repeat([]byte{0x5A}, benchPayloadBytes)

	// Warm up the connection so the dial is not measured.
	if err := c.Add(b.Context(), addr, client.AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1}); err != nil {
		b.Fatal(err)
	}

	b.SetBytes(benchPayloadBytes)
	b.ReportAllocs()
	var wg sync.WaitGroup
	var failed sync.Once
	var firstErr error
	b.ResetTimer()
	for i := range int64(b.N) {
		wg.Add(1)
		// AddAsync blocks while 256 are in flight: the client's window is the pipeline depth.
		c.AddAsync(addr, client.AddRequest{LedgerID: 1, EntryID: i + 1, LastAddConfirmed: i, Payload: payload}, func(err error) {
			if err != nil {
				failed.Do(func() { firstErr = err })
			}
			wg.Done()
		})
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	elapsed := b.Elapsed()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "entries/s")
	if baseline := rawExchange(b, b.N); baseline > 0 {
		b.ReportMetric(elapsed.Seconds()/baseline.Seconds(), "raw_tcp_ratio")
	}
}

// rawExchange times n pipelined exchanges of bare frames over loopback (a 4-byte length and
// a 1 KiB body out, a 16-byte ack back, 256 in flight, buffered both ways): the floor that
// any protocol over one TCP connection sits on.
func rawExchange(b *testing.B, n int) time.Duration {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		r, w := bufio.NewReaderSize(nc, 64<<10), bufio.NewWriterSize(nc, 64<<10)
		var header [4]byte
		body := make([]byte, benchPayloadBytes)
		ack := make([]byte, 16)
		for {
			if _, err := io.ReadFull(r, header[:]); err != nil {
				return
			}
			if _, err := io.ReadFull(r, body[:binary.BigEndian.Uint32(header[:])]); err != nil {
				return
			}
			w.Write(ack)
			if r.Buffered() == 0 && w.Flush() != nil {
				return
			}
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()

	window := make(chan struct{}, benchInFlight)
	acked := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(nc, 64<<10)
		ack := make([]byte, 16)
		for range n {
			if _, err := io.ReadFull(r, ack); err != nil {
				acked <- err
				return
			}
			<-window
		}
		acked <- nil
	}()
	frame := binary.BigEndian.AppendUint32(nil, benchPayloadBytes)
	frame = append(frame, bytes.Repeat([]byte{0x5A}, benchPayloadBytes)...)
	w := bufio.NewWriterSize(nc, 64<<10)
	start := time.Now()
	for range n {
		select {
		case window <- struct{}{}:
		default:
			// Window full: push what is buffered, then wait for room, as the client does.
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
			window <- struct{}{}
		}
		w.Write(frame)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := <-acked; err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
