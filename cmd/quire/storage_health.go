package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/admin"
	"quire/internal/bookie/node"
	"quire/internal/broker"
	"quire/internal/meta"
)

// This file is what the processes report about their storage: the health
// of the metadata store and of each bookie (writable or read-only, with
// disk usage), their metrics, and the disk usage the standalone bookies
// measure (the metadata store's released ballast counted as taken).

// metaReporter: down when the embedded member stopped or the store cannot
// be read; degraded while etcd lives on its released ballast (free space
// below the ballast's size); ok otherwise, the detail saying whether the
// ballast is released (it comes back once free space is three times its
// size).
func metaReporter(embedded *meta.Embedded, store meta.Store) admin.Reporter {
	return func(ctx context.Context) admin.Report {
		st := embedded.Status()
		detail := map[string]any{"ballast_bytes": st.BallastBytes}
		if st.TotalBytes > 0 {
			detail["free_bytes"], detail["total_bytes"] = st.FreeBytes, st.TotalBytes
		}
		if st.Err != nil {
			return admin.Report{Status: admin.StatusDown, Reason: st.Err.Error(), Detail: detail}
		}
		if _, err := store.Get(ctx, clusterKey); err != nil {
			return admin.Report{Status: admin.StatusDown, Reason: err.Error(), Detail: detail}
		}
		if released := embedded.ReleasedBallastBytes(); released > 0 {
			detail["ballast_released_bytes"] = released
			if st.TotalBytes > 0 && st.FreeBytes < uint64(released) {
				return admin.Report{Status: admin.StatusDegraded, Detail: detail,
					Reason: fmt.Sprintf("disk nearly full: ballast released, %s free for etcd", bytesOrDash(st.FreeBytes))}
			}
		}
		return admin.Report{Status: admin.StatusOK, Detail: detail}
	}
}

// readOnlyReasoner is what a bookie (its engine, or the node) may tell
// about why it is read-only ("disk usage 96% above the high threshold 95%",
// "out of space ..."); without it the reason is derived from its disk usage.
type readOnlyReasoner interface {
	ReadOnlyReason() (readOnly bool, reason string)
}

// bookieReporter: down when the bookie does not serve; degraded while it
// is read-only (reads served, adds refused), with its disk usage.
func bookieReporter(n *node.Node) admin.Reporter {
	return func(ctx context.Context) admin.Report {
		free, total, readOnly := n.Engine().Info()
		reason := ""
		if r, ok := any(n).(readOnlyReasoner); ok {
			readOnly, reason = r.ReadOnlyReason()
		} else if r, ok := any(n.Engine()).(readOnlyReasoner); ok {
			readOnly, reason = r.ReadOnlyReason()
		}
		detail := map[string]any{"read_only": readOnly}
		if total > 0 {
			detail["free_bytes"], detail["total_bytes"] = free, total
			detail["used_percent"] = usedPercent(free, total)
		}
		if err := n.Healthy(ctx); err != nil {
			return admin.Report{Status: admin.StatusDown, Reason: err.Error(), Detail: detail}
		}
		if !readOnly {
			return admin.Report{Status: admin.StatusOK, Detail: detail}
		}
		if reason == "" {
			reason = "disk usage above the bookie's high threshold"
			if total > 0 {
				reason = fmt.Sprintf("disk %.1f%% used, above the bookie's high threshold", usedPercent(free, total))
			}
		}
		return admin.Report{Status: admin.StatusDegraded, Reason: "read-only: " + reason + "; reads served, adds refused", Detail: detail}
	}
}

// brokerReporter: down without its metadata session; degraded while it
// refuses produces because the bookies cannot take writes.
func brokerReporter(br *broker.Broker) admin.Reporter {
	return func(ctx context.Context) admin.Report {
		if err := br.Healthy(ctx); err != nil {
			return admin.ReportOf(err)
		}
		if why := br.StorageRefusal(); why != nil {
			return admin.Report{Status: admin.StatusDegraded, Reason: "produces refused (NOT_ENOUGH_REPLICAS): " + why.Error()}
		}
		return admin.Report{Status: admin.StatusOK}
	}
}

func usedPercent(free, total uint64) float64 {
	if total == 0 {
		return 0
	}
	return math.Round(1000*float64(total-min(free, total))/float64(total)) / 10
}

var metaMetricsOnce sync.Once

// registerMetaMetrics exports the embedded member's state.
func registerMetaMetrics(embedded *meta.Embedded) {
	metaMetricsOnce.Do(func() {
		prometheus.DefaultRegisterer.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "quire_meta_up", Help: "1 while the embedded metadata store (etcd) runs and has a leader."}, func() float64 {
				if embedded.Healthy() != nil {
					return 0
				}
				return 1
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "quire_meta_ballast_bytes", Help: "Size of the ballast file that keeps disk space for etcd; 0 once released (the disk is nearly full)."}, func() float64 {
				return float64(embedded.Status().BallastBytes)
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "quire_meta_disk_free_bytes", Help: "Free bytes of the file system holding etcd's data directory."}, func() float64 {
				return float64(embedded.Status().FreeBytes)
			}),
		)
	})
}

// sharedDiskUsage measures a standalone bookie's disk: the file system's
// used bytes, plus the metadata store's released ballast when it lives on
// the same file system. The released ballast is etcd's room; a bookie that
// saw it free would turn writable again and fill it.
func sharedDiskUsage(bookieDir, metaDir string, embedded *meta.Embedded) func() (used, total uint64, err error) {
	return func() (used, total uint64, err error) {
		used, total, dev, err := fileSystemUsage(bookieDir)
		if err != nil {
			return 0, 0, err
		}
		if released := embedded.ReleasedBallastBytes(); released > 0 {
			if _, _, metaDev, err := fileSystemUsage(metaDir); err == nil && metaDev == dev {
				used = min(total, used+uint64(released))
			}
		}
		return used, total, nil
	}
}

// logDegraded logs, once at startup, every component that is not ok: a
// process started on a full disk says so.
func logDegraded(ctx context.Context, health *admin.Health, log *slog.Logger) {
	for _, c := range health.Report(ctx, 2*time.Second).Components {
		if c.Status != admin.StatusOK {
			log.Warn("started "+c.Status.String(), "component", c.Name, "reason", c.Reason)
		}
	}
}
