package kafka

// DescribeLogDirs (key 35), versions 1–4 (Kafka 4.0 dropped v0, KIP-896;
// v5's is_cordoned, KIP-1066, is not served).
//
// Each broker answers for itself: its log directories with the partition
// replicas each holds (null topics: all; otherwise those named that are
// here), each replica's size in bytes and offset lag (how far its log end
// is behind the leader's high watermark as far as this broker knows it; 0
// on the leader and when not known), is_future false (no replica is ever
// moved between directories); v4 adds the file system's total and usable
// bytes (−1 when unknown).
//
// The directories are the Backend's (LogDirDescriber: ISR mode's data
// directory). Ledger-mode topics are not in any: their data is on the
// bookies, whose disks `quire bookie` reports in its own metrics, not on
// a broker; a broker that keeps no replicas answers no directories.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleDescribeLogDirs(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.DescribeLogDirsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
		resp.Dirs = []kmsg.DescribeLogDirsResponseDir{}
		ld, ok := s.backend.(LogDirDescriber)
		if !ok {
			return resp
		}
		dirs, err := ld.LogDirs(ctx)
		if err != nil {
			// v3+ has a top-level code; before, an empty answer is all
			// there is to say.
			resp.ErrorCode = rq.note(s.errorCode(err, "describe log dirs"))
			return resp
		}
		var wanted map[string]map[int32]bool // nil: every replica
		if req.Topics != nil {
			wanted = map[string]map[int32]bool{}
			for _, t := range req.Topics {
				if wanted[t.Topic] == nil {
					wanted[t.Topic] = map[int32]bool{}
				}
				for _, p := range t.Partitions {
					wanted[t.Topic][p] = true
				}
			}
		}
		for _, d := range dirs {
			rd := kmsg.NewDescribeLogDirsResponseDir()
			rd.Dir, rd.TotalBytes, rd.UsableBytes = d.Dir, d.TotalBytes, d.UsableBytes
			rd.ErrorCode = rq.note(s.errorCode(d.Err, "describe log dirs: dir", "dir", d.Dir))
			index := map[string]int{}
			for _, r := range d.Replicas {
				if wanted != nil && !wanted[r.Topic][r.Partition] {
					continue
				}
				i, ok := index[r.Topic]
				if !ok {
					i = len(rd.Topics)
					index[r.Topic] = i
					rt := kmsg.NewDescribeLogDirsResponseDirTopic()
					rt.Topic = r.Topic
					rd.Topics = append(rd.Topics, rt)
				}
				rp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
				rp.Partition, rp.Size, rp.OffsetLag, rp.IsFuture = r.Partition, r.Size, r.OffsetLag, false
				rd.Topics[i].Partitions = append(rd.Topics[i].Partitions, rp)
			}
			if rd.Topics == nil {
				rd.Topics = []kmsg.DescribeLogDirsResponseDirTopic{}
			}
			resp.Dirs = append(resp.Dirs, rd)
		}
		return resp
	}
}
