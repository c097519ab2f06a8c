package sim

import "time"

// netConfig is the network's behaviour for one run.
type netConfig struct {
	delayMin, delayMax time.Duration
	// slowProb: a message is held up by an extra slowMin..slowMax (a
	// congested link); later messages on the same link queue behind it.
	slowProb         float64
	slowMin, slowMax time.Duration
	// lossProb: a message vanishes (a reset connection that loses what was in flight).
	lossProb float64
}

// network models point-to-point links between named nodes. Each (from, to)
// link is FIFO, as a TCP connection is: a message is never delivered before
// one sent earlier on the same link. Messages are delayed at random, lost at
// random, and dropped while a partition cuts the link (checked both when the
// message is sent and when it would be delivered).
type network struct {
	e     *engine
	cfg   netConfig
	tail  map[[2]string]time.Duration // per link: delivery time of the last message sent
	cuts  []linkCut
	stats *Stats
}

// linkCut drops messages from `from` to `to` until `until`; an empty name
// matches every node.
type linkCut struct {
	from, to string
	until    time.Duration
}

func newNetwork(e *engine, cfg netConfig, stats *Stats) *network {
	return &network{e: e, cfg: cfg, tail: map[[2]string]time.Duration{}, stats: stats}
}

// cut drops every message from `from` to `to` for d ("" matches any node).
func (n *network) cut(from, to string, d time.Duration) {
	n.cuts = append(n.cuts, linkCut{from: from, to: to, until: n.e.now + d})
}

// isCut reports whether a partition currently separates from and to.
func (n *network) isCut(from, to string) bool {
	live := n.cuts[:0]
	hit := false
	for _, c := range n.cuts {
		if c.until <= n.e.now {
			continue // healed
		}
		live = append(live, c)
		if (c.from == "" || c.from == from) && (c.to == "" || c.to == to) {
			hit = true
		}
	}
	n.cuts = live
	return hit
}

// send carries a message from one node to another; deliver runs on arrival.
// what describes the message for the trace.
func (n *network) send(from, to, what string, deliver func()) {
	n.stats.Messages++
	if n.isCut(from, to) {
		n.stats.Dropped++
		n.e.tracef(from, "-> %s %s DROPPED (partition)", to, what)
		return
	}
	if n.e.chance(n.cfg.lossProb) {
		n.stats.Dropped++
		n.e.tracef(from, "-> %s %s LOST", to, what)
		return
	}
	d := n.e.between(n.cfg.delayMin, n.cfg.delayMax)
	if n.e.chance(n.cfg.slowProb) {
		d += n.e.between(n.cfg.slowMin, n.cfg.slowMax)
	}
	at := n.e.now + d
	link := [2]string{from, to}
	if t := n.tail[link]; at < t {
		at = t // FIFO: queue behind the previous message on this link
	}
	n.tail[link] = at
	n.e.tracef(from, "-> %s %s", to, what)
	n.e.at(at, func() {
		if n.isCut(from, to) {
			n.stats.Dropped++
			n.e.tracef(to, "<- %s %s DROPPED in flight (partition)", from, what)
			return
		}
		deliver()
	})
}
