package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Role is what a node runs.
type Role string

const (
	RoleMeta   Role = "meta"
	RoleBookie Role = "bookie"
	RoleBroker Role = "broker"
)

// Ports inside each node's namespace: every node has its own address, so
// all use the defaults.
const (
	metaClientPort = "2379"
	metaPeerPort   = "2380"
	bookiePort     = "3181"
	bookieHTTPPort = "8000"
	kafkaPort      = "9092"
	brokerHTTPPort = "8080"
	// sessionTTL of bookies and brokers: short, so that kills and pauses
	// lead to failovers (and paused brokers to zombies) within a fault.
	sessionTTL = "4s"
)

// node is one `quire` process in its own namespace, restarted on the same
// data directory after a kill.
type node struct {
	name string
	role Role
	ip   string
	zone string
	args []string
	dir  string // data; its log is dir + ".log"

	mu       sync.Mutex
	proc     *os.Process
	exited   chan struct{} // closed when the current process has exited
	killing  bool          // the nemesis (or close) is ending the process: do not restart it
	paused   bool
	restarts int // restarts after the process ended by itself
}

// cluster is a run's set of nodes.
type cluster struct {
	binary string
	env    []string
	net    *network
	dir    string
	nodes  []*node
	logf   func(format string, args ...any)
	http   *http.Client

	smallDisks bool
	diskRole   Role     // the role whose data dirs are small file systems
	isr        bool     // ISR mode (clusterShape.isr)
	mounts     []string // small file systems mounted, unmounted by stop

	mu      sync.Mutex
	closing bool
}

// clusterShape says how many of each role to run.
type clusterShape struct {
	bookies, brokers int
	// isr: the brokers keep ISR replicas (--isr-data-dir) and the Kafka
	// namespace is set to ISR mode before they start (setISRPolicy).
	isr          bool
	ledgerMutant string // passed to the brokers ("": none)
	bookieMutant string // passed to the bookies ("": none)
	// smallDisks mounts a small file system under the data dir of each
	// node that keeps data (disk.go): the bookies, or in ISR mode the
	// brokers; for disk-full faults.
	smallDisks bool
}

// isrNamespace is the Kafka namespace (the brokers' default) that ISR
// mode puts in ISR mode.
const isrNamespace = "public/default"

func newCluster(binary string, env []string, nw *network, dir string, shape clusterShape, logf func(string, ...any)) *cluster {
	c := &cluster{binary: binary, env: env, net: nw, dir: dir, logf: logf, smallDisks: shape.smallDisks, diskRole: RoleBookie, isr: shape.isr,
		http: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: nw.DialContext, DisableKeepAlives: true}}}
	zones := []string{"a", "b", "c"}
	var initial []string
	var metaEndpoints []string
	for i := 1; i <= 3; i++ {
		ip := fmt.Sprintf("%s%d", subnet, 10+i)
		initial = append(initial, fmt.Sprintf("m%d=http://%s:%s", i, ip, metaPeerPort))
		metaEndpoints = append(metaEndpoints, ip+":"+metaClientPort)
	}
	for i := 1; i <= 3; i++ {
		n := c.add(fmt.Sprintf("meta%d", i), RoleMeta, fmt.Sprintf("%s%d", subnet, 10+i), zones[i-1])
		n.args = []string{"meta", "--name", fmt.Sprintf("m%d", i), "--data-dir", n.dir,
			"--client-addr", n.ip + ":" + metaClientPort, "--peer-addr", n.ip + ":" + metaPeerPort,
			"--initial-cluster", strings.Join(initial, ","), "--ballast-mb", "0", "--quota-backend-mb", "256"}
	}
	endpoints := strings.Join(metaEndpoints, ",")
	for i := 1; i <= shape.bookies; i++ {
		n := c.add(fmt.Sprintf("bookie%d", i), RoleBookie, fmt.Sprintf("%s%d", subnet, 20+i), zones[(i-1)%3])
		n.args = []string{"bookie", "--id", n.name, "--data-dir", n.dir, "--listen", n.ip + ":" + bookiePort,
			"--http-addr", n.ip + ":" + bookieHTTPPort, "--meta-endpoints", endpoints, "--zone", n.zone,
			"--session-ttl", sessionTTL, "--write-cache-mb", "8", "--read-cache-mb", "4", "--journal-file-mb", "8",
			"--disk-reserve-mb", "0", "--disk-usage-high", "0.99", "--disk-usage-low", "0.98", "--disk-usage-warn", "0.97"}
		if shape.bookieMutant != "" {
			n.args = append(n.args, "--bookie-mutant", shape.bookieMutant)
		}
	}
	for i := 1; i <= shape.brokers; i++ {
		n := c.add(fmt.Sprintf("broker%d", i), RoleBroker, fmt.Sprintf("%s%d", subnet, 30+i), zones[(i-1)%3])
		n.args = []string{"broker", "--broker-id", fmt.Sprint(i), "--meta-endpoints", endpoints, "--zone", n.zone,
			"--kafka-addr", n.ip + ":" + kafkaPort, "--http-addr", n.ip + ":" + brokerHTTPPort,
			"--broker-session-ttl", sessionTTL}
		if shape.ledgerMutant != "" {
			n.args = append(n.args, "--ledger-mutant", shape.ledgerMutant)
		}
		if shape.isr {
			// A directory inside the data dir: the data dir may be a small
			// file system's root, whose lost+found is no replica.
			n.args = append(n.args, "--isr-data-dir", filepath.Join(n.dir, "isr"))
		}
	}
	if shape.isr {
		c.diskRole = RoleBroker
	}
	return c
}

func (c *cluster) add(name string, role Role, ip, zone string) *node {
	n := &node{name: name, role: role, ip: ip, zone: zone, dir: filepath.Join(c.dir, name)}
	c.nodes = append(c.nodes, n)
	return n
}

// kafkaAddrs are the brokers' Kafka listeners.
func (c *cluster) kafkaAddrs() []string {
	var addrs []string
	for _, n := range c.nodes {
		if n.role == RoleBroker {
			addrs = append(addrs, n.ip+":"+kafkaPort)
		}
	}
	return addrs
}

func (c *cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// start creates every namespace and starts the nodes role by role, each
// role once the one before is healthy.
func (c *cluster) start(ctx context.Context) error {
	for _, n := range c.nodes {
		if err := c.net.addNode(ctx, n.name, n.ip); err != nil {
			return err
		}
		if n.role == c.diskRole && c.smallDisks {
			kind, err := mountSmallDisk(n.dir, n.dir+".img")
			if err != nil {
				return err
			}
			c.mounts = append(c.mounts, n.dir)
			c.logf("%s: data dir on %d MB of %s", n.name, smallDiskMB, kind)
		}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return err
		}
	}
	for _, role := range []Role{RoleMeta, RoleBookie, RoleBroker} {
		if role == RoleBroker && c.isr {
			// A broker reads the namespace's policy when it starts
			// (min.insync.replicas, unclean election): set it first.
			if err := c.setISRPolicy(ctx); err != nil {
				return err
			}
		}
		for _, n := range c.nodes {
			if n.role == role {
				if err := c.spawn(n); err != nil {
					return err
				}
			}
		}
		if err := c.waitHealthy(ctx, 90*time.Second, role); err != nil {
			return err
		}
	}
	return nil
}

// setISRPolicy puts the Kafka namespace in ISR mode (RF 3, minISR 2,
// unclean election off) the way an operator does, with `quire admin`, run
// in the switch namespace against the etcd members.
func (c *cluster) setISRPolicy(ctx context.Context) error {
	var endpoints []string
	for _, m := range c.roles(RoleMeta) {
		endpoints = append(endpoints, m.ip+":"+metaClientPort)
	}
	admin := []string{"admin", "--meta-endpoints", strings.Join(endpoints, ","), "--timeout", "20s"}
	steps := [][]string{
		{"tenants", "create", "public"},
		{"namespaces", "create", isrNamespace},
		{"namespaces", "set-replication", isrNamespace, "--mode", "isr",
			"--replication-factor", fmt.Sprint(isrReplicationFactor), "--min-insync-replicas", fmt.Sprint(isrMinInSyncReplicas),
			"--unclean-leader-election=false"},
	}
	for _, step := range steps {
		cmd := c.net.command("sw", c.binary, append(admin, step...)...)
		cmd.Env = append(os.Environ(), c.env...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		err := startProcess(cmd)
		if err == nil {
			// An interrupted harness does not wait out --timeout.
			stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
			err = cmd.Wait()
			stop()
		}
		// A fresh cluster has neither; "exists" is a retry's leftover.
		if err != nil && !strings.Contains(out.String(), "exists") {
			return fmt.Errorf("quire %s: %w: %s", strings.Join(step, " "), err, strings.TrimSpace(out.String()))
		}
	}
	c.logf("namespace %s in ISR mode: replication factor %d, min.insync.replicas %d, unclean leader election off",
		isrNamespace, isrReplicationFactor, isrMinInSyncReplicas)
	return nil
}

// spawn starts n's process and a goroutine that restarts it if it ends by
// itself (a broker that lost its session stops, as Pulsar's does).
func (c *cluster) spawn(n *node) error {
	logFile, err := os.OpenFile(n.dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := c.net.command(n.name, c.binary, n.args...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	fmt.Fprintf(logFile, "=== %s start: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(n.args, " "))
	if err := startProcess(cmd); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	exited := make(chan struct{})
	n.mu.Lock()
	n.proc, n.exited, n.killing, n.paused = cmd.Process, exited, false, false
	n.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logFile.Close()
		close(exited)
		n.mu.Lock()
		expected := n.killing
		n.mu.Unlock()
		c.mu.Lock()
		closing := c.closing
		c.mu.Unlock()
		if expected || closing {
			return
		}
		c.logf("%s exited by itself (%v); restarting it", n.name, err)
		time.Sleep(time.Second) // a process that stops at once must not spin
		c.mu.Lock()
		closing = c.closing
		c.mu.Unlock()
		n.mu.Lock()
		// The nemesis may have taken the node over meanwhile (its kill and
		// restart own the process then).
		superseded := n.killing || n.proc != cmd.Process
		if !superseded {
			n.restarts++
		}
		n.mu.Unlock()
		if closing || superseded {
			return
		}
		if err := c.spawn(n); err != nil {
			c.logf("restart %s: %v", n.name, err)
		}
	}()
	return nil
}

// kill SIGKILLs n and waits for it to end; restart brings it back.
func (c *cluster) kill(n *node) {
	n.mu.Lock()
	n.killing = true
	proc, exited := n.proc, n.exited
	n.mu.Unlock()
	if proc == nil {
		return
	}
	proc.Signal(syscall.SIGKILL)
	<-exited
}

func (c *cluster) restart(n *node) error { return c.spawn(n) }

// roles lists the nodes of the given roles, in the cluster's order.
func (c *cluster) roles(roles ...Role) []*node {
	var out []*node
	for _, n := range c.nodes {
		if containsRole(roles, n.role) {
			out = append(out, n)
		}
	}
	return out
}

// killAll SIGKILLs nodes at the same instant (every signal is sent before
// any exit is awaited) and waits for them all to end; restartAll brings
// them back in the cluster's order (bookies before brokers).
func (c *cluster) killAll(nodes []*node) {
	var exits []chan struct{}
	for _, n := range nodes {
		n.mu.Lock()
		n.killing = true
		proc, exited := n.proc, n.exited
		n.mu.Unlock()
		if proc != nil {
			proc.Signal(syscall.SIGKILL)
			exits = append(exits, exited)
		}
	}
	for _, exited := range exits {
		<-exited
	}
}

func (c *cluster) restartAll(nodes []*node) error {
	var firstErr error
	for _, n := range nodes {
		if err := c.spawn(n); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// cutMeta cuts n off from the etcd members other than itself, both ways,
// with blackhole routes in their namespaces; joinMeta removes them.
func (c *cluster) cutMeta(ctx context.Context, n *node) error {
	for _, m := range c.roles(RoleMeta) {
		if m == n {
			continue
		}
		err := c.net.blackhole(ctx, n.name, []string{m.ip})
		if err == nil {
			err = c.net.blackhole(ctx, m.name, []string{n.ip})
		}
		if err != nil {
			c.joinMeta(ctx, n)
			return err
		}
	}
	return nil
}

func (c *cluster) joinMeta(ctx context.Context, n *node) error {
	var firstErr error
	for _, m := range c.roles(RoleMeta) {
		if m == n {
			continue
		}
		for _, err := range []error{c.net.unblackhole(ctx, n.name, []string{m.ip}), c.net.unblackhole(ctx, m.name, []string{n.ip})} {
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}

// oneWay drops n's packets to every other node and to the clients
// (outbound), or theirs to n, with blackhole routes in the sending
// namespaces; twoWay removes them.
func (c *cluster) oneWay(ctx context.Context, n *node, outbound bool) error {
	if outbound {
		ips := []string{clientIP}
		for _, o := range c.nodes {
			if o != n {
				ips = append(ips, o.ip)
			}
		}
		return c.net.blackhole(ctx, n.name, ips)
	}
	if err := c.net.blackholeIn(ctx, c.net.switchNS, []string{n.ip}); err != nil {
		return err
	}
	for _, o := range c.nodes {
		if o == n {
			continue
		}
		if err := c.net.blackhole(ctx, o.name, []string{n.ip}); err != nil {
			c.twoWay(ctx, n, outbound)
			return err
		}
	}
	return nil
}

func (c *cluster) twoWay(ctx context.Context, n *node, outbound bool) error {
	if outbound {
		ips := []string{clientIP}
		for _, o := range c.nodes {
			if o != n {
				ips = append(ips, o.ip)
			}
		}
		return c.net.unblackhole(ctx, n.name, ips)
	}
	firstErr := c.net.unblackholeIn(ctx, c.net.switchNS, []string{n.ip})
	for _, o := range c.nodes {
		if o == n {
			continue
		}
		if err := c.net.unblackhole(ctx, o.name, []string{n.ip}); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// pause and resume send SIGSTOP and SIGCONT.
func (c *cluster) pause(n *node) error  { return c.signal(n, syscall.SIGSTOP, true) }
func (c *cluster) resume(n *node) error { return c.signal(n, syscall.SIGCONT, false) }

func (c *cluster) signal(n *node, sig syscall.Signal, paused bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.paused = paused
	if n.proc == nil {
		return fmt.Errorf("%s not running", n.name)
	}
	return n.proc.Signal(sig)
}

// healthURL is where n says it is ready.
func (n *node) healthURL() string {
	switch n.role {
	case RoleMeta:
		return "http://" + n.ip + ":" + metaClientPort + "/health"
	case RoleBookie:
		return "http://" + n.ip + ":" + bookieHTTPPort + "/healthz"
	default:
		return "http://" + n.ip + ":" + brokerHTTPPort + "/readyz"
	}
}

// waitHealthy waits until every node of the given roles (all when none)
// answers its health check with 200.
func (c *cluster) waitHealthy(ctx context.Context, limit time.Duration, roles ...Role) error {
	deadline := time.Now().Add(limit)
	for _, n := range c.nodes {
		if len(roles) > 0 && !containsRole(roles, n.role) {
			continue
		}
		var last string
		for {
			last = c.probe(ctx, n)
			if last == "" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not healthy within %v: %s (log: %s.log)", n.name, limit, last, n.dir)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// probe returns "" when n answers 200, else why not.
func (c *cluster) probe(ctx context.Context, n *node) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.healthURL(), nil)
	if err != nil {
		return err.Error()
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.Status
	}
	return ""
}

func containsRole(roles []Role, r Role) bool {
	for _, x := range roles {
		if x == r {
			return true
		}
	}
	return false
}

// stop kills every node (waking paused ones), waits for them to end and
// unmounts their small file systems.
// With dump, each gets SIGQUIT first, so that its log ends with the stacks
// of all its goroutines (Go's default), for a run that found something.
func (c *cluster) stop(dump bool) {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	for _, n := range c.nodes {
		n.mu.Lock()
		n.killing = true
		proc, exited := n.proc, n.exited
		n.mu.Unlock()
		if proc == nil {
			continue
		}
		proc.Signal(syscall.SIGCONT)
		if dump {
			proc.Signal(syscall.SIGQUIT)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
			}
		}
		proc.Signal(syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			c.logf("%s did not exit 10s after SIGKILL", n.name)
		}
	}
	c.unmountAll()
}

// hasSmallDisk reports whether n's data dir is a small file system the
// harness mounted.
func (c *cluster) hasSmallDisk(n *node) bool {
	for _, m := range c.mounts {
		if m == n.dir {
			return true
		}
	}
	return false
}

// unmountAll unmounts the small file systems (the processes are gone).
func (c *cluster) unmountAll() {
	for _, m := range c.mounts {
		if err := unmountSmallDisk(m); err != nil {
			c.logf("cleanup: %v", err)
		}
	}
	c.mounts = nil
}

// selfRestarts is how many times nodes ended by themselves and were
// restarted.
func (c *cluster) selfRestarts() map[string]int {
	out := map[string]int{}
	for _, n := range c.nodes {
		n.mu.Lock()
		if n.restarts > 0 {
			out[n.name] = n.restarts
		}
		n.mu.Unlock()
	}
	return out
}
