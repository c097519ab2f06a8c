package ledger_test

import (
	"bytes"
	"errors"
	"testing"

	"quire/internal/ledger"
)

func TestEntryFramingRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name             string
		ledgerID, entry  int64
		cumulativeLength int64
		payload          []byte
	}{
		{"empty payload", 1, 0, 0, nil},
		{"small", 7, 3, 42, []byte("hello")},
		{"binary", 1 << 40, 1<<31 + 5, 1 << 50, []byte{0, 0xff, 0, 0xfe}},
		{"large", 9, 1000, 1 << 20, bytes.Repeat([]byte("x"), 1<<16)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			framed := ledger.EncodeEntry(tc.ledgerID, tc.entry, tc.cumulativeLength, tc.payload)
			payload, length, err := ledger.DecodeEntry(tc.ledgerID, tc.entry, framed)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(payload, tc.payload) || length != tc.cumulativeLength {
				t.Fatalf("got %q length %d, want %q length %d", payload, length, tc.payload, tc.cumulativeLength)
			}
		})
	}
}

// TestEntryFramingDetectsCorruption: every single flipped bit, a truncated
// frame, and a frame presented under another ledger or entry id all fail
// with ErrCorruptEntry (the checksum covers the ids too, so a bookie that
// answers with the wrong entry is caught).
func TestEntryFramingDetectsCorruption(t *testing.T) {
	framed := ledger.EncodeEntry(5, 9, 100, []byte("payload"))
	for i := range framed {
		for bit := 0; bit < 8; bit++ {
			bad := bytes.Clone(framed)
			bad[i] ^= 1 << bit
			if _, _, err := ledger.DecodeEntry(5, 9, bad); !errors.Is(err, ledger.ErrCorruptEntry) {
				t.Fatalf("byte %d bit %d flipped: got %v, want ErrCorruptEntry", i, bit, err)
			}
		}
	}
	for n := 0; n < len(framed); n++ {
		if _, _, err := ledger.DecodeEntry(5, 9, framed[:n]); !errors.Is(err, ledger.ErrCorruptEntry) {
			t.Fatalf("truncated to %d bytes: got %v, want ErrCorruptEntry", n, err)
		}
	}
	if _, _, err := ledger.DecodeEntry(6, 9, framed); !errors.Is(err, ledger.ErrCorruptEntry) {
		t.Fatalf("other ledger: got %v, want ErrCorruptEntry", err)
	}
	if _, _, err := ledger.DecodeEntry(5, 10, framed); !errors.Is(err, ledger.ErrCorruptEntry) {
		t.Fatalf("other entry: got %v, want ErrCorruptEntry", err)
	}
}
