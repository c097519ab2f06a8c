package meta

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"quire/internal/testutil"
)

// ownerHelperEnv makes the test binary act as a separate owner process: it
// creates an ephemeral key and then waits to be killed.
const ownerHelperEnv = "QUIRE_META_OWNER_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(ownerHelperEnv); spec != "" {
		os.Exit(runOwnerHelper(spec))
	}
	os.Exit(m.Run())
}

// runOwnerHelper: spec is "endpoint|key|ttl".
func runOwnerHelper(spec string) int {
	parts := strings.Split(spec, "|")
	ttl, _ := time.ParseDuration(parts[2])
	s, err := NewEtcd(EtcdConfig{Endpoints: []string{parts[0]}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	sess, err := s.NewSession(ctx, ttl)
	if err == nil {
		_, err = sess.CreateEphemeral(ctx, parts[1], []byte(fmt.Sprint(os.Getpid())))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	// Bounded: the parent kills us long before this.
	time.Sleep(2 * time.Minute)
	return 2
}

// testEtcd is an embedded etcd member on free loopback ports in a temp dir.
type testEtcd struct {
	cfg      EmbedConfig
	embedded *Embedded
}

func startTestEtcd(t *testing.T) *testEtcd {
	t.Helper()
	te := &testEtcd{cfg: EmbedConfig{
		DataDir:   t.TempDir(),
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)),
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)),
	}}
	te.start(t)
	t.Cleanup(func() { te.embedded.Close() })
	return te
}

func (te *testEtcd) start(t *testing.T) {
	t.Helper()
	e, err := StartEmbedded(te.cfg)
	if err != nil {
		t.Fatal(err)
	}
	te.embedded = e
}

func (te *testEtcd) restart(t *testing.T) {
	t.Helper()
	te.embedded.Close()
	te.start(t)
}

func (te *testEtcd) client(t *testing.T) *Etcd {
	t.Helper()
	s, err := NewEtcd(EtcdConfig{Endpoints: []string{te.embedded.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEtcdConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd; run without -short")
	}
	te := startTestEtcd(t)
	admin := te.client(t)
	t.Cleanup(func() { admin.Close() })
	runConformance(t, harness{
		newClient: func(t *testing.T) Store { return te.client(t) },
		killOwner: func(t *testing.T, key string, ttl time.Duration) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), ownerHelperEnv+"="+te.embedded.Endpoint()+"|"+key+"|"+ttl.String())
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "ready\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("owner process: %q %v", line, err)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
		},
		expire: func(t *testing.T, s Session) {
			// What the server does when keep-alives stop: revoke the lease.
			if _, err := admin.Client().Revoke(context.Background(), clientv3LeaseID(s.ID())); err != nil {
				t.Fatal(err)
			}
		},
		compact: func(t *testing.T, rev int64) {
			if _, err := admin.Client().Compact(context.Background(), rev); err != nil {
				t.Fatal(err)
			}
		},
		disrupt: func(t *testing.T) { te.restart(t) },
		restart: func(t *testing.T) { te.restart(t) },
	})
}
