package group

// DescribeGroups v0–v5 (v6+ adds GROUP_ID_NOT_FOUND for unknown groups, as
// Kafka 4 does) and ListGroups v0–v5 on the state machine.

import (
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupOperations is the authorized-operations bit set of a group when no
// ACLs apply: READ (3), DELETE (6), DESCRIBE (8).
const groupOperations = 1<<3 | 1<<6 | 1<<8

// Describe is the group's DescribeGroups entry. Members carry their
// metadata and assignment only when the group is Stable, as in Kafka.
func (g *Group) Describe(version int16, includeOperations bool) kmsg.DescribeGroupsResponseGroup {
	d := kmsg.NewDescribeGroupsResponseGroup()
	d.Group = g.name
	d.AuthorizedOperations = math.MinInt32
	if includeOperations {
		d.AuthorizedOperations = groupOperations
	}
	if !g.Exists() {
		d.State = Dead.String()
		if version >= 6 {
			d.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "group " + g.name + " not found"
			d.ErrorMessage = &msg
		}
		return d
	}
	d.State = g.state.String()
	d.ProtocolType = g.protocolType
	if g.state == Stable {
		d.Protocol = g.protocol
	}
	for _, m := range g.members {
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID = m.id
		dm.InstanceID = m.instanceID
		dm.ClientID = m.client.ID
		dm.ClientHost = m.client.Host
		dm.ProtocolMetadata = []byte{}
		dm.MemberAssignment = []byte{}
		if g.state == Stable {
			dm.ProtocolMetadata = m.metadata(g.protocol)
			dm.MemberAssignment = m.assignment
		}
		d.Members = append(d.Members, dm)
	}
	return d
}

// Listing is the group's ListGroups entry.
func (g *Group) Listing() kmsg.ListGroupsResponseGroup {
	l := kmsg.NewListGroupsResponseGroup()
	l.Group = g.name
	l.ProtocolType = g.protocolType
	l.GroupState = g.state.String()
	l.GroupType = "classic"
	return l
}
