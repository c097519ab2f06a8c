package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/autorecovery"
	"quire/internal/bookie/client"
	"quire/internal/bookie/registry"
	"quire/internal/ledger"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/meta"
	"quire/internal/testutil"
	"quire/internal/tlsconf"
)

// internalPKI makes the cluster's CA (quire certs: server.pem is every
// node's identity, valid for server and client authentication) and a
// stranger's.
func internalPKI(t *testing.T) (certs, other string) {
	t.Helper()
	certs, other = t.TempDir(), t.TempDir()
	for _, d := range []string{certs, other} {
		if out, err := runQuire(t, "certs", "--dir", d, "--hosts", "127.0.0.1", "--client", "ops"); err != nil {
			t.Fatalf("quire certs: %v: %s", err, out)
		}
	}
	return certs, other
}

func pkiClient(t *testing.T, ca, certDir, name string) *tls.Config {
	t.Helper()
	files := tlsconf.ClientFiles{CA: filepath.Join(ca, "ca.pem")}
	if certDir != "" {
		files.Cert, files.Key = filepath.Join(certDir, name+".pem"), filepath.Join(certDir, name+"-key.pem")
	}
	cfg, err := tlsconf.Client(files)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// produceConsumeKafka writes n records to topic through a plaintext Kafka
// listener and reads them back: the broker stored them on the bookies.
func produceConsumeKafka(t *testing.T, kafkaAddr, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	var got []string
	for len(got) < n {
		fetches := cl.PollRecords(ctx, n-len(got))
		if errs := fetches.Errors(); len(errs) > 0 {
			t.Fatalf("consume: %v", errs)
		}
		for _, r := range fetches.Records() {
			got = append(got, string(r.Value))
		}
	}
	for i, v := range got {
		if v != fmt.Sprintf("r%d", i) {
			t.Fatalf("record %d is %q", i, v)
		}
	}
}

// bookieRefusals checks what a bookie requiring client certificates of the
// cluster's CA refuses: a plaintext client, one without a certificate, one
// with a certificate of another CA. A client with the cluster's client
// certificate gets through.
func bookieRefusals(t *testing.T, bookieAddr, certs, other string) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	add := func(cfg *tls.Config, ledger int64) error {
		bc := client.New(client.Config{Logger: quiet, TLS: cfg, DialTimeout: 3 * time.Second})
		defer bc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return bc.Add(ctx, bookieAddr, client.AddRequest{LedgerID: ledger, EntryID: 0, LastAddConfirmed: -1, Payload: []byte("x")})
	}
	// Ledger ids far above what the cluster allocates.
	if err := add(pkiClient(t, certs, certs, "client"), 1<<40); err != nil {
		t.Fatalf("bookie add with the cluster's client certificate: %v", err)
	}
	for i, c := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"plaintext", nil},
		{"no client certificate", pkiClient(t, certs, "", "")},
		{"client certificate of another CA", pkiClient(t, certs, other, "client")},
		{"not trusting the bookie's CA", pkiClient(t, other, certs, "client")},
	} {
		if err := add(c.cfg, 1<<40+int64(i)+1); !errors.Is(err, client.ErrConnection) {
			t.Errorf("bookie, %s: %v, want ErrConnection", c.name, err)
		}
	}
}

// metaRefusals checks the same of an etcd member requiring client
// certificates.
func metaRefusals(t *testing.T, clientAddr, certs, other string) {
	t.Helper()
	try := func(endpoint string, cfg *tls.Config) error {
		s, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{endpoint}, TLS: cfg, DialTimeout: 2 * time.Second})
		if err != nil {
			return err
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = s.List(ctx, "/quire/bookies/", meta.ListOptions{})
		return err
	}
	if err := try("https://"+clientAddr, pkiClient(t, certs, certs, "client")); err != nil {
		t.Fatalf("etcd with the cluster's client certificate: %v", err)
	}
	for _, c := range []struct {
		name     string
		endpoint string
		cfg      *tls.Config
	}{
		{"plaintext", "http://" + clientAddr, nil},
		{"no client certificate", "https://" + clientAddr, pkiClient(t, certs, "", "")},
		{"client certificate of another CA", "https://" + clientAddr, pkiClient(t, certs, other, "client")},
	} {
		if err := try(c.endpoint, c.cfg); err == nil {
			t.Errorf("etcd, %s: answered", c.name)
		}
	}
}

// TestClusterOverTLS: `quire meta` serving clients and peers over mutual
// TLS, three `quire bookie`s serving mutual TLS (and connecting to etcd,
// and their autorecovery to other bookies, with the node certificate), and
// a `quire broker` connecting to both with it. Kafka records produced
// through the broker are stored on the bookies and read back; the bookies
// and etcd refuse plaintext clients, clients without a certificate and
// certificates of another CA.
func TestClusterOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs five quire processes")
	}
	certs, other := internalPKI(t)
	cert, key, ca := filepath.Join(certs, "server.pem"), filepath.Join(certs, "server-key.pem"), filepath.Join(certs, "ca.pem")
	metaClient := []string{"--meta-tls-ca", ca, "--meta-tls-cert", cert, "--meta-tls-key", key}
	bookieClient := []string{"--bookie-tls-ca", ca, "--bookie-tls-client-cert", cert, "--bookie-tls-client-key", key}

	clientAddr := freeAddr(t)
	metaProc := startQuire(t, "meta", "--data-dir", t.TempDir(), "--client-addr", clientAddr, "--peer-addr", freeAddr(t),
		"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca,
		"--peer-tls-cert", cert, "--peer-tls-key", key, "--peer-tls-ca", ca)
	store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{"https://" + clientAddr}, TLS: pkiClient(t, certs, certs, "server")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	registered := func(prefix string, n int, procs ...*quireProcess) func() bool {
		return func() bool {
			for _, p := range procs {
				select {
				case err := <-p.exited:
					t.Fatalf("a quire process exited: %v\n%s", err, tail(p.output.String(), 4000))
				default:
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			res, err := store.List(ctx, prefix, meta.ListOptions{})
			return err == nil && len(res.KVs) == n
		}
	}
	testutil.WaitForWithin(t, 60*time.Second, "etcd over TLS", registered("/quire/bookies/", 0, metaProc))

	var bookies []*quireProcess
	var bookieAddrs []string
	for i, zone := range []string{"a", "b", "c"} {
		addr := freeAddr(t)
		bookieAddrs = append(bookieAddrs, addr)
		args := []string{"bookie", "--data-dir", t.TempDir(), "--listen", addr, "--id", fmt.Sprintf("b%d", i+1), "--zone", zone,
			"--meta-endpoints", clientAddr, "--http-addr", "", "--session-ttl", "3s",
			"--bookie-tls-cert", cert, "--bookie-tls-key", key, "--bookie-tls-client-ca", ca}
		args = append(append(args, metaClient...), bookieClient...)
		bookies = append(bookies, startQuire(t, args...))
	}
	testutil.WaitForWithin(t, 60*time.Second, "bookies registered over etcd TLS", registered("/quire/bookies/", 3, bookies...))

	kafkaAddr := freeAddr(t)
	args := append([]string{"broker", "--meta-endpoints", clientAddr, "--broker-id", "1", "--kafka-addr", kafkaAddr,
		"--http-addr", freeAddr(t)}, metaClient...)
	broker := startQuire(t, append(args, bookieClient...)...)
	testutil.WaitForWithin(t, 60*time.Second, "the broker registered over etcd TLS", registered("/quire/brokers/", 1, broker))

	produceConsumeKafka(t, kafkaAddr, "internal-tls", 50)
	bookieRefusals(t, bookieAddrs[0], certs, other)
	metaRefusals(t, clientAddr, certs, other)

	// quire admin reads the cluster over etcd's TLS with the same flags,
	// and gets nothing without them.
	out, err := runQuire(t, append([]string{"admin", "bookies", "--meta-endpoints", clientAddr, "--timeout", "5s"}, metaClient...)...)
	if err != nil || !strings.Contains(out, bookieAddrs[0]) {
		t.Fatalf("quire admin bookies over etcd TLS: %v\n%s", err, out)
	}
	if out, err := runQuire(t, "admin", "bookies", "--meta-endpoints", clientAddr, "--timeout", "3s"); err == nil {
		t.Fatalf("quire admin bookies without TLS to a TLS etcd succeeded:\n%s", out)
	}
}

// TestStandaloneInternalTLS: a standalone whose embedded etcd and bookies
// require client certificates, with nothing but their certificates given:
// its own clients (the broker, the registrations) present the node
// certificate and trust the client CA. Kafka records go through; the
// bookies and etcd refuse what TestClusterOverTLS's refuse.
func TestStandaloneInternalTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	certs, other := internalPKI(t)
	cert, key, ca := filepath.Join(certs, "server.pem"), filepath.Join(certs, "server-key.pem"), filepath.Join(certs, "ca.pem")
	httpAddr, kafkaAddr, clientAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	bookieAddrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	p := startQuire(t, "standalone", "--data-dir", t.TempDir(), "--http-addr", httpAddr, "--kafka-addr", kafkaAddr,
		"--meta-client-addr", clientAddr, "--meta-peer-addr", freeAddr(t),
		"--bookie-addrs", strings.Join(bookieAddrs, ","), "--pulsar-addr", freeAddr(t),
		"--meta-tls-cert", cert, "--meta-tls-key", key, "--meta-tls-client-ca", ca,
		"--meta-peer-tls-cert", cert, "--meta-peer-tls-key", key, "--meta-peer-tls-ca", ca,
		"--bookie-tls-cert", cert, "--bookie-tls-key", key, "--bookie-tls-client-ca", ca)
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 60*time.Second)
	produceConsumeKafka(t, kafkaAddr, "standalone-internal-tls", 50)
	bookieRefusals(t, bookieAddrs[1], certs, other)
	metaRefusals(t, clientAddr, certs, other)
}

// TestAutorecoveryOverTLS: four `quire bookie` processes in three zones
// serve mutual TLS and run autorecovery with the node certificate as their
// bookie client's identity. Ledgers written over TLS to the bookies; one
// bookie SIGKILLed; autorecovery (reading the survivors and writing the
// replacement, both over mutual TLS) takes it out of every ledger, and every
// entry reads back from each bookie of its write quorum.
func TestAutorecoveryOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	const ledgers, entries = 6, 20
	certs, _ := internalPKI(t)
	cert, key, ca := filepath.Join(certs, "server.pem"), filepath.Join(certs, "server-key.pem"), filepath.Join(certs, "ca.pem")
	endpoint := startTestMeta(t)
	zones := map[ledger.BookieID]string{"b1": "a", "b2": "b", "b3": "c", "b4": "a"}
	procs := map[ledger.BookieID]*quireProcess{}
	for _, id := range []ledger.BookieID{"b1", "b2", "b3", "b4"} {
		procs[id] = startQuire(t, "bookie", "--id", string(id), "--zone", zones[id], "--data-dir", t.TempDir(), "--listen", freeAddr(t),
			"--meta-endpoints", endpoint, "--http-addr", "", "--session-ttl", "2s", "--autorecovery-lost-bookie-delay", "1s",
			"--bookie-tls-cert", cert, "--bookie-tls-key", key, "--bookie-tls-client-ca", ca,
			"--bookie-tls-ca", ca, "--bookie-tls-client-cert", cert, "--bookie-tls-client-key", key)
	}
	store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitCond(t, "four bookies registered and an auditor", 30*time.Second, procs, func() bool {
		infos, err := registry.List(ctx, store)
		st, serr := autorecovery.ReadStatus(ctx, store)
		return err == nil && serr == nil && len(infos) == 4 && st.Auditor != nil
	})

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	bc := client.New(client.Config{Logger: quiet, TLS: pkiClient(t, certs, certs, "client"),
		RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 100 * time.Millisecond})
	defer bc.Close()
	lc := ledgerclient.New(ledgerclient.Config{Store: store, Bookies: bc, Tick: 20 * time.Millisecond, RequestTimeoutTicks: 50,
		Name: "autorecovery-tls-test", Logger: quiet})
	ids := writeClosedLedgers(t, ctx, lc, ledgers, entries)

	// The victim: the zone-a bookie of the first ledger, so at least one
	// ledger needs a repair (the other zone-a bookie is its replacement).
	md0, _, err := lc.ReadMetadata(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	victim := ledger.BookieID("b4")
	if hasRef(md0, "b1") {
		victim = "b1"
	}
	if err := procs[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	delete(procs, victim) // waitCond fails when one of procs exits
	waitCond(t, "autorecovery to replace the lost bookie in every ledger", 60*time.Second, procs, func() bool {
		for _, id := range ids {
			md, _, err := lc.ReadMetadata(ctx, id)
			if err != nil || hasRef(md, victim) {
				return false
			}
		}
		return true
	})
	infos, err := registry.List(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[ledger.BookieID]string{}
	for _, i := range infos {
		addrs[ledger.BookieID(i.ID)] = i.Addr
	}
	for _, id := range ids {
		md, _, err := lc.ReadMetadata(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for e := range int64(entries) {
			for _, b := range md.WriteQuorumBookies(e) {
				got, err := bc.Read(ctx, addrs[b], id, e, false)
				if err != nil {
					t.Fatalf("ledger %d entry %d on %s over TLS: %v", id, e, b, err)
				}
				if p, _, err := ledger.DecodeEntry(id, e, got.Payload); err != nil || !bytes.Equal(p, arPayload(id, e)) {
					t.Fatalf("ledger %d entry %d on %s: wrong bytes (%v)", id, e, b, err)
				}
			}
		}
	}
}

// TestStandaloneISRReplicationOverTLS: three ISR brokers whose Kafka
// listeners require client certificates of the cluster's CA; followers
// fetch from leaders over mutual TLS with the node certificate
// (--isr-tls-*). Every partition reaches an ISR of three (the followers
// are replicating) and acks=all records produced over TLS read back.
func TestStandaloneISRReplicationOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	const topic, partitions, n = "isr-tls", 2, 200
	certs, _ := internalPKI(t)
	cert, key, ca := filepath.Join(certs, "server.pem"), filepath.Join(certs, "server-key.pem"), filepath.Join(certs, "ca.pem")
	kafkaAddr, httpAddr := freePortRun(t, 3), freeAddr(t)
	p := startQuire(t, "standalone", "--mode", "isr", "--brokers", "3", "--data-dir", t.TempDir(), "--http-addr", httpAddr,
		"--kafka-addr", kafkaAddr, "--meta-client-addr", freeAddr(t), "--meta-peer-addr", freeAddr(t),
		"--bookie-addrs", strings.Join([]string{freeAddr(t), freeAddr(t), freeAddr(t)}, ","), "--pulsar-addr", "",
		"--kafka-tls-cert", cert, "--kafka-tls-key", key, "--kafka-tls-client-ca", ca,
		"--isr-tls-ca", ca, "--isr-tls-client-cert", cert, "--isr-tls-client-key", key)
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 60*time.Second)
	host, port, _ := net.SplitHostPort(kafkaAddr)
	first, _ := strconv.Atoi(port)
	var seeds []string
	for i := range 3 {
		seeds = append(seeds, net.JoinHostPort(host, strconv.Itoa(first+i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTLSConfig(pkiClient(t, certs, certs, "client")),
		kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		// Not idempotent, so that a record the followers never replicate
		// fails by its delivery timeout (an idempotent client keeps
		// retrying a request of unknown outcome) and a broken build fails
		// the test instead of hanging it.
		kgo.DisableIdempotentWrite(), kgo.RecordDeliveryTimeout(30*time.Second),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	testutil.WaitForWithin(t, 30*time.Second, "three brokers in Metadata", func() bool {
		md, err := adm.BrokerMetadata(ctx)
		return err == nil && len(md.Brokers) == 3
	})
	testutil.WaitForWithin(t, 30*time.Second, "the topic created with replication factor 3", func() bool {
		_, err := adm.CreateTopic(ctx, partitions, 3, nil, topic)
		return err == nil || errors.Is(err, kerr.TopicAlreadyExists)
	})
	testutil.WaitForWithin(t, 60*time.Second, "every partition with an ISR of 3", func() bool {
		return isrOnline(ctx, adm, topic, partitions, 3, nil)
	})
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%4), Value: fmt.Appendf(nil, "r%d", i)}).FirstErr(); err != nil {
			t.Fatalf("acks=all produce %d over TLS: %v", i, err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < n {
		fs := cl.PollRecords(ctx, n)
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("consume: %v", errs)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	// The followers were fetching all along: the ISR is still whole.
	if !isrOnline(ctx, adm, topic, partitions, 3, nil) {
		t.Fatal("an ISR shrank while producing: followers did not keep up over TLS")
	}
}
