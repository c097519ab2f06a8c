package kafka_test

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
)

// FuzzSASLConnection feeds a sequence of frames to one connection of a
// SASL listener. Invariant: nothing but ApiVersions, SaslHandshake and
// SaslAuthenticate (or a raw v0 token) is ever answered before the
// connection has authenticated; and nothing panics. The seeds hold alice's
// password, so the fuzzer also explores authenticated connections.
func FuzzSASLConnection(f *testing.F) {
	frame := func(req kmsg.Request, version int16) []byte {
		req.SetVersion(version)
		return kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz")).AppendRequest(nil, req, 1)[4:]
	}
	hs := func(mech string, v int16) []byte {
		r := kmsg.NewPtrSASLHandshakeRequest()
		r.Mechanism = mech
		return frame(r, v)
	}
	au := func(token string, v int16) []byte {
		r := kmsg.NewPtrSASLAuthenticateRequest()
		r.SASLAuthBytes = []byte(token)
		return frame(r, v)
	}
	md := frame(kmsg.NewPtrMetadataRequest(), 12)
	av := frame(kmsg.NewPtrApiVersionsRequest(), 3)
	for _, seq := range [][][]byte{
		{av, hs("PLAIN", 1), au("\x00alice\x00alice-secret", 2), md, hs("PLAIN", 1), au("\x00alice\x00alice-secret", 2), md},
		{hs("PLAIN", 0), []byte("\x00alice\x00alice-secret"), md},
		{hs("SCRAM-SHA-256", 1), au("n,,n=alice,r=abc", 1), au("c=biws,r=abc,p=AAAA", 1), md},
		{hs("SCRAM-SHA-512", 0), []byte("n,,n=alice,r=abc"), md},
		{md},
		{av, av},
		{hs("GSSAPI", 1), md},
		{hs("PLAIN", 1), av, md},
		{au("\x00alice\x00alice-secret", 2), md},
	} {
		f.Add(joinFrames(seq))
	}
	s := newSASLSetup(f)
	sec := s.security(func(sec *kafka.Security) { sec.SessionLifetime = 0 })
	server, err := kafka.New(kafka.Config{Backend: kafkatest.New(kafka.Node{ID: 1, Host: "127.0.0.1", Port: 9092}),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { server.Close() })
	// The harness reaches what the invariant is about: the first seed
	// authenticates, and its Metadata requests are answered.
	reached := server.ServeSASLFrames(context.Background(), &sec, splitFrames(joinFrames([][]byte{av, hs("PLAIN", 1), au("\x00alice\x00alice-secret", 2), md})))
	if len(reached) != 4 || !reached[3].Authenticated || kmsg.Key(reached[3].Key) != kmsg.Metadata {
		f.Fatalf("the authenticating seed did not get Metadata answered: %+v", reached)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, got := range server.ServeSASLFrames(context.Background(), &sec, splitFrames(data)) {
			switch kmsg.Key(got.Key) {
			case kmsg.ApiVersions, kmsg.SASLHandshake, kmsg.SASLAuthenticate:
			default:
				if !got.Authenticated {
					t.Fatalf("%s answered before authentication", kmsg.NameForKey(got.Key))
				}
			}
		}
	})
}

// joinFrames and splitFrames: frames as [2-byte length][bytes]…
func joinFrames(frames [][]byte) []byte {
	var out []byte
	for _, f := range frames {
		out = binary.BigEndian.AppendUint16(out, uint16(len(f)))
		out = append(out, f...)
	}
	return out
}

func splitFrames(data []byte) [][]byte {
	var out [][]byte
	for len(data) >= 2 && len(out) < 16 {
		n := int(binary.BigEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}
