package directio

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestBufferAligned(t *testing.T) {
	for _, n := range []int{1, BlockBytes, 3*BlockBytes + 5, 1 << 20} {
		b := Buffer(n)
		if len(b) != n || cap(b) != n || !Aligned(b) {
			t.Errorf("Buffer(%d): len %d cap %d aligned %v", n, len(b), cap(b), Aligned(b))
		}
		if n > 1 && Aligned(b[1:]) {
			t.Errorf("Buffer(%d)[1:] reported aligned", n)
		}
	}
}

// On Linux, a file on the test's disk takes direct I/O, and an aligned
// write of whole blocks then succeeds while an unaligned one is refused,
// which shows the flag is really set.
func TestEnable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("direct I/O is Linux-only")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !Enable(f.Fd()) {
		t.Skip("the temporary directory's file system refuses direct I/O")
	}
	b := Buffer(2 * BlockBytes)
	if _, err := f.Write(b); err != nil {
		t.Fatalf("aligned write: %v", err)
	}
	if _, err := f.Write(b[1 : BlockBytes+1]); err == nil {
		t.Fatal("unaligned write accepted: direct I/O is not on")
	}
}
