package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// namePrefix starts the name of every network namespace and temporary
// directory the harness creates, followed by the harness's pid, so that a
// sweep can tell leftovers of a dead harness from those of a live one.
const namePrefix = "qchaos-"

// subnet is the run's private /24. It exists only inside the run's own
// namespaces (the bridge lives in the switch namespace, not the host's), so
// runs never clash with each other or with the host's addresses.
const subnet = "10.77.0."

// network is one run's private network: a switch namespace holding a bridge
// (br0, 10.77.0.1/24), which is also where the harness's own clients dial
// from, and one namespace per node with a veth (eth0 inside it, v-<node> on
// the bridge). Nothing is created in the host's namespace.
type network struct {
	prefix    string   // namePrefix + pid + "-" + run + "-"
	switchNS  string   // the namespace of the bridge and of the harness's clients
	nodes     []string // node namespaces created, for close
	switchErr error
}

func newNetwork(ctx context.Context, run int) (*network, error) {
	n := &network{prefix: fmt.Sprintf("%s%d-%d-", namePrefix, os.Getpid(), run)}
	n.switchNS = n.prefix + "sw"
	steps := [][]string{
		{"netns", "add", n.switchNS},
		{"-n", n.switchNS, "link", "set", "lo", "up"},
		{"-n", n.switchNS, "link", "add", "br0", "type", "bridge"},
		{"-n", n.switchNS, "addr", "add", subnet + "1/24", "dev", "br0"},
		{"-n", n.switchNS, "link", "set", "br0", "up"},
		// br1 holds the minority side of a split: its nodes reach each
		// other, not br0's.
		{"-n", n.switchNS, "link", "add", "br1", "type", "bridge"},
		{"-n", n.switchNS, "link", "set", "br1", "up"},
	}
	for _, s := range steps {
		if err := ipCommand(ctx, s...); err != nil {
			n.close()
			return nil, err
		}
	}
	return n, nil
}

// namespace is the name of node's namespace.
func (n *network) namespace(node string) string { return n.prefix + node }

// addNode creates node's namespace and plugs it into the bridge at ip.
func (n *network) addNode(ctx context.Context, node, ip string) error {
	ns := n.namespace(node)
	if err := ipCommand(ctx, "netns", "add", ns); err != nil {
		return err
	}
	n.nodes = append(n.nodes, ns)
	port := "v-" + node
	steps := [][]string{
		{"-n", ns, "link", "set", "lo", "up"},
		{"link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", n.switchNS},
		{"-n", n.switchNS, "link", "set", port, "master", "br0", "up"},
		{"-n", ns, "addr", "add", ip + "/24", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := ipCommand(ctx, s...); err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
	}
	return nil
}

// isolate cuts node off from every other namespace (both directions) by
// taking its bridge port down; established connections stay open and see
// their packets dropped, as in a real partition. connect undoes it.
func (n *network) isolate(ctx context.Context, node string) error {
	return ipCommand(ctx, "-n", n.switchNS, "link", "set", "v-"+node, "down")
}

func (n *network) connect(ctx context.Context, node string) error {
	return ipCommand(ctx, "-n", n.switchNS, "link", "set", "v-"+node, "up")
}

// split moves nodes' bridge ports to br1: they keep talking to each other
// and lose everyone on br0, including the harness's clients. join moves
// them back.
func (n *network) split(ctx context.Context, nodes []string) error {
	for _, node := range nodes {
		if err := ipCommand(ctx, "-n", n.switchNS, "link", "set", "v-"+node, "master", "br1"); err != nil {
			return err
		}
	}
	return nil
}

func (n *network) join(ctx context.Context, nodes []string) error {
	var firstErr error
	for _, node := range nodes {
		if err := ipCommand(ctx, "-n", n.switchNS, "link", "set", "v-"+node, "master", "br0"); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// blackhole drops node's packets to ips (one way: theirs still arrive) with
// blackhole routes in node's own namespace, more specific than the
// subnet's; established connections lose their packets too (the route
// change invalidates their cached route). unblackhole removes them, and
// is quiet about routes already gone.
func (n *network) blackhole(ctx context.Context, node string, ips []string) error {
	return n.blackholeIn(ctx, n.namespace(node), ips)
}

func (n *network) unblackhole(ctx context.Context, node string, ips []string) error {
	return n.unblackholeIn(ctx, n.namespace(node), ips)
}

// clientIP is the harness's clients' address (br0's, in the switch
// namespace).
const clientIP = subnet + "1"

// blackholeIn and unblackholeIn are blackhole and unblackhole in the
// namespace ns (a node's, or the switch's, where the clients are).
func (n *network) blackholeIn(ctx context.Context, ns string, ips []string) error {
	for _, ip := range ips {
		if err := ipCommand(ctx, "-n", ns, "route", "add", "blackhole", ip+"/32"); err != nil {
			n.unblackholeIn(ctx, ns, ips)
			return err
		}
	}
	return nil
}

func (n *network) unblackholeIn(ctx context.Context, ns string, ips []string) error {
	var firstErr error
	for _, ip := range ips {
		err := ipCommand(ctx, "-n", ns, "route", "del", "blackhole", ip+"/32")
		if err != nil && !strings.Contains(err.Error(), "No such process") && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// command returns a command that runs bin inside node's namespace. ip
// netns exec replaces itself with bin, so the pid is bin's own. Start it
// with startProcess.
func (n *network) command(node, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.namespace(node), bin}, args...)...)
	// The node dies with the harness even if the harness is SIGKILLed and
	// no cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// spawnRequest asks the spawner thread to start a command.
type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce     sync.Once
	spawnRequests = make(chan spawnRequest)
)

// startProcess starts cmd from one thread that lives as long as the
// harness. Pdeathsig fires when the thread that forked the child ends, not
// the process, and Go ends threads: every thread dialFrom locks ends with
// its goroutine, and it may be a thread that forked a node earlier. A
// thread locked for good by a goroutine that never returns never ends and
// never runs dialFrom.
func startProcess(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		go func() {
			runtime.LockOSThread()
			for req := range spawnRequests {
				req.done <- req.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd, done}
	return <-done
}

// DialContext dials from the switch namespace: the harness's clients
// (kgo, HTTP) reach the nodes through it, so none of their traffic leaves
// the run's namespaces.
func (n *network) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return dialFrom(ctx, n.switchNS, network, addr)
}

// dialFrom creates the socket on a thread that has joined namespace ns. A
// socket stays in the namespace it was created in, whatever thread uses it
// later. The thread is locked and never unlocked, so Go ends it when the
// goroutine returns instead of reusing it in the wrong namespace.
func dialFrom(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join("/var/run/netns", ns))
		if err != nil {
			done <- result{err: fmt.Errorf("dial %s from %s: %w", addr, ns, err)}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("dial %s: setns %s: %w", addr, ns, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		done <- result{c, err}
	}()
	r := <-done
	return r.conn, r.err
}

// close kills whatever still runs in the run's namespaces and deletes them
// (deleting a namespace deletes its veth ends and the bridge).
func (n *network) close() error {
	var firstErr error
	for _, ns := range append(n.nodes, n.switchNS) {
		if err := deleteNamespace(ns); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	n.nodes = nil
	return firstErr
}

// deleteNamespace SIGKILLs every process in ns and deletes it.
func deleteNamespace(ns string) error {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGCONT) // a stopped process is killed too, but wake it anyway
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := exec.Command("ip", "netns", "del", ns).Run(); err != nil {
		if _, statErr := os.Stat(filepath.Join("/var/run/netns", ns)); os.IsNotExist(statErr) {
			return nil
		}
		return fmt.Errorf("ip netns del %s: %w", ns, err)
	}
	return nil
}

// Sweep removes what a harness that is no longer running left behind: its
// namespaces (and the processes in them) and its temporary directories.
// With all set it removes those of this process too (--cleanup-only).
// It returns what it removed.
func Sweep(all bool) ([]string, error) {
	var removed []string
	var firstErr error
	stale := func(name string) bool {
		rest, ok := strings.CutPrefix(name, namePrefix)
		if !ok {
			return false
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil {
			return false
		}
		if pid == os.Getpid() {
			return all
		}
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !stale(fields[0]) {
			continue
		}
		if err := deleteNamespace(fields[0]); err != nil && firstErr == nil {
			firstErr = err
		}
		removed = append(removed, "netns "+fields[0])
	}
	// Mounts first (a disk-full run's small file systems), so that removing
	// a directory never reaches into a file system still mounted there.
	mounts, err := harnessMounts()
	if err != nil && firstErr == nil {
		firstErr = err
	}
	for _, m := range mounts {
		rel, err := filepath.Rel(os.TempDir(), m)
		if err != nil || !stale(strings.Split(rel, string(filepath.Separator))[0]) {
			continue
		}
		if err := unmountSmallDisk(m); err != nil && firstErr == nil {
			firstErr = err
		}
		removed = append(removed, "mount "+m)
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), namePrefix+"*"))
	for _, d := range dirs {
		if stale(filepath.Base(d)) {
			if err := os.RemoveAll(d); err != nil && firstErr == nil {
				firstErr = err
			}
			removed = append(removed, "dir "+d)
		}
	}
	return removed, firstErr
}

// Available reports why the harness cannot run here, or nil: it needs root
// and the ip tool with network namespace support.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("chaos needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("chaos needs the ip tool (iproute2): %w", err)
	}
	if err := exec.Command("ip", "netns", "list").Run(); err != nil {
		return fmt.Errorf("ip netns unavailable: %w", err)
	}
	return nil
}

func ipCommand(ctx context.Context, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
