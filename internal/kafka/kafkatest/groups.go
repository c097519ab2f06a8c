package kafkatest

import (
	"context"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Groups is a trivial kafka.GroupCoordinator: it stores committed offsets
// and lists/deletes the groups that have some, but runs no group membership
// (JoinGroup, SyncGroup, Heartbeat and LeaveGroup answer INVALID_REQUEST).
// Consumers in tests therefore assign partitions directly and commit with
// generation -1, as "simple" consumers do.
type Groups struct {
	mu      sync.Mutex
	offsets map[string]map[string]map[int32]committed // group → topic → partition
}

type committed struct {
	offset   int64
	metadata *string
}

// NewGroups returns an empty coordinator.
func NewGroups() *Groups { return &Groups{offsets: make(map[string]map[string]map[int32]committed)} }

func (g *Groups) JoinGroup(_ context.Context, req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.ErrorCode = kerr.InvalidRequest.Code
	return resp
}

func (g *Groups) SyncGroup(_ context.Context, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	resp.ErrorCode = kerr.InvalidRequest.Code
	return resp
}

func (g *Groups) Heartbeat(_ context.Context, req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	resp.ErrorCode = kerr.InvalidRequest.Code
	return resp
}

func (g *Groups) LeaveGroup(_ context.Context, req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	resp.ErrorCode = kerr.InvalidRequest.Code
	return resp
}

func (g *Groups) OffsetCommit(_ context.Context, req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	g.mu.Lock()
	defer g.mu.Unlock()
	group := g.offsets[req.Group]
	if group == nil {
		group = make(map[string]map[int32]committed)
		g.offsets[req.Group] = group
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		if group[t.Topic] == nil {
			group[t.Topic] = make(map[int32]committed)
		}
		for _, p := range t.Partitions {
			group[t.Topic][p.Partition] = committed{offset: p.Offset, metadata: p.Metadata}
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (g *Groups) OffsetFetch(_ context.Context, req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	g.mu.Lock()
	defer g.mu.Unlock()
	if req.Version < 8 {
		for _, t := range g.fetchTopics(req.Group, singleTopics(req.Topics)) {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.Metadata, rp.LeaderEpoch = p.Partition, p.Offset, p.Metadata, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	for _, rg := range req.Groups {
		out := kmsg.NewOffsetFetchResponseGroup()
		out.Group = rg.Group
		var want []kmsg.OffsetFetchRequestTopic
		if rg.Topics != nil {
			for _, t := range rg.Topics {
				want = append(want, kmsg.OffsetFetchRequestTopic{Topic: t.Topic, Partitions: t.Partitions})
			}
		}
		for _, t := range g.fetchTopics(rg.Group, want) {
			ot := kmsg.NewOffsetFetchResponseGroupTopic()
			ot.Topic = t.Topic
			for _, p := range t.Partitions {
				op := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				op.Partition, op.Offset, op.Metadata, op.LeaderEpoch = p.Partition, p.Offset, p.Metadata, -1
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		resp.Groups = append(resp.Groups, out)
	}
	return resp
}

func singleTopics(ts []kmsg.OffsetFetchRequestTopic) []kmsg.OffsetFetchRequestTopic { return ts }

type fetchedPartition struct {
	Partition int32
	Offset    int64
	Metadata  *string
}

type fetchedTopic struct {
	Topic      string
	Partitions []fetchedPartition
}

// fetchTopics answers want (nil: every committed offset of the group).
func (g *Groups) fetchTopics(group string, want []kmsg.OffsetFetchRequestTopic) []fetchedTopic {
	stored := g.offsets[group]
	if want == nil {
		for topic, parts := range stored {
			t := kmsg.OffsetFetchRequestTopic{Topic: topic}
			for p := range parts {
				t.Partitions = append(t.Partitions, p)
			}
			sort.Slice(t.Partitions, func(i, j int) bool { return t.Partitions[i] < t.Partitions[j] })
			want = append(want, t)
		}
		sort.Slice(want, func(i, j int) bool { return want[i].Topic < want[j].Topic })
	}
	var out []fetchedTopic
	for _, t := range want {
		ft := fetchedTopic{Topic: t.Topic}
		for _, p := range t.Partitions {
			c, ok := stored[t.Topic][p]
			if !ok {
				c = committed{offset: -1}
			}
			ft.Partitions = append(ft.Partitions, fetchedPartition{Partition: p, Offset: c.offset, Metadata: c.metadata})
		}
		out = append(out, ft)
	}
	return out
}

func (g *Groups) OffsetDelete(_ context.Context, req *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.offsets[req.Group] == nil {
		resp.ErrorCode = kerr.GroupIDNotFound.Code
		return resp
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			delete(g.offsets[req.Group][t.Topic], p.Partition)
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (g *Groups) ListGroups(_ context.Context, req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	g.mu.Lock()
	defer g.mu.Unlock()
	for name := range g.offsets {
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = name, "consumer", "Empty", "classic"
		resp.Groups = append(resp.Groups, lg)
	}
	sort.Slice(resp.Groups, func(i, j int) bool { return resp.Groups[i].Group < resp.Groups[j].Group })
	return resp
}

func (g *Groups) DescribeGroups(_ context.Context, req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, name := range req.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group, dg.State, dg.ProtocolType = name, "Dead", ""
		if g.offsets[name] != nil {
			dg.State, dg.ProtocolType = "Empty", "consumer"
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

func (g *Groups) DeleteGroups(_ context.Context, req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, name := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = name
		if g.offsets[name] == nil {
			rg.ErrorCode = kerr.GroupIDNotFound.Code
		}
		delete(g.offsets, name)
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}
