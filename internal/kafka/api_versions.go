package kafka

// ApiVersions (key 18), versions 0–5.
//
// It advertises exactly the APIs this package serves (the table below), at
// the versions it serves. Max versions are kmsg's max for the key unless a
// version needs something Quire lacks; min versions follow Kafka 4.0, which
// dropped the pre-record-batch (magic 0/1) Produce and Fetch versions we
// could not serve without down-conversion anyway. The group APIs are
// advertised only when the Backend has a GroupCoordinator.
//
// SaslHandshake and SaslAuthenticate are advertised only on a listener with
// SASL (sasl.go), DescribeUserScramCredentials and AlterUserScramCredentials
// only where the listener has a credential store (scram_credentials.go).
//
// CreateAcls, DescribeAcls and DeleteAcls (acls.go) are advertised only on
// a listener with an authorizer (Kafka advertises them always and answers
// SECURITY_DISABLED without one).
//
// OffsetForLeaderEpoch, ElectLeaders, DescribeLogDirs,
// AlterPartitionReassignments and ListPartitionReassignments are
// advertised always: what a Backend without leader epochs, elections, log
// directories or replicas to move answers is in their files (ledger mode).
//
// Not advertised (the connection closes if a client sends them anyway, as
// Kafka does for an API it does not know): transactions (AddPartitionsToTxn,
// EndTxn, …), delegation tokens, DeleteRecords,
// the legacy AlterConfigs, the KIP-848 consumer group
// and share group APIs, and everything broker-to-broker or KRaft.
//
// Deviations: an unsupported ApiVersions version is answered per KIP-511
// with a v0 response, UNSUPPORTED_VERSION and the full list of supported
// APIs (Kafka lists the same). No features are advertised.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

type versionRange struct{ min, max int16 }

// apiSpec is one served API.
type apiSpec struct {
	key      kmsg.Key
	min, max int16
	// group APIs are served only when the Backend has a GroupCoordinator,
	// txn APIs only when it has a TransactionCoordinator.
	group, txn bool
	// sasl APIs only on SASL listeners (their handling is saslGate's);
	// credentials APIs only where the listener has a credential store.
	sasl, credentials bool
	// acls APIs only where the listener has an authorizer.
	acls    bool
	handler handler
}

// apis is every API served. A max below kmsg's says why in the API's file.
var apis = []apiSpec{
	{key: kmsg.Produce, min: 3, max: 13, handler: handleProduce},
	{key: kmsg.Fetch, min: 4, max: 18, handler: handleFetch},
	{key: kmsg.ListOffsets, min: 1, max: 11, handler: handleListOffsets},
	{key: kmsg.Metadata, min: 0, max: 13, handler: handleMetadata},
	{key: kmsg.OffsetCommit, min: 2, max: 9, group: true, handler: handleOffsetCommit},
	{key: kmsg.OffsetFetch, min: 1, max: 9, group: true, handler: handleOffsetFetch},
	{key: kmsg.FindCoordinator, min: 0, max: 6, group: true, handler: handleFindCoordinator},
	{key: kmsg.JoinGroup, min: 2, max: 9, group: true, handler: handleJoinGroup},
	{key: kmsg.Heartbeat, min: 0, max: 4, group: true, handler: handleHeartbeat},
	{key: kmsg.LeaveGroup, min: 0, max: 5, group: true, handler: handleLeaveGroup},
	{key: kmsg.SyncGroup, min: 0, max: 5, group: true, handler: handleSyncGroup},
	{key: kmsg.DescribeGroups, min: 0, max: 5, group: true, handler: handleDescribeGroups},
	{key: kmsg.ListGroups, min: 0, max: 5, group: true, handler: handleListGroups},
	{key: kmsg.ApiVersions, min: 0, max: 4, handler: handleApiVersions},
	{key: kmsg.CreateTopics, min: 2, max: 7, handler: handleCreateTopics},
	{key: kmsg.DeleteTopics, min: 1, max: 6, handler: handleDeleteTopics},
	{key: kmsg.InitProducerID, min: 0, max: 5, handler: handleInitProducerID},
	{key: kmsg.DescribeConfigs, min: 1, max: 4, handler: handleDescribeConfigs},
	{key: kmsg.CreatePartitions, min: 0, max: 3, handler: handleCreatePartitions},
	{key: kmsg.DeleteGroups, min: 0, max: 3, group: true, handler: handleDeleteGroups},
	{key: kmsg.IncrementalAlterConfigs, min: 0, max: 1, handler: handleIncrementalAlterConfigs},
	{key: kmsg.OffsetDelete, min: 0, max: 0, group: true, handler: handleOffsetDelete},
	{key: kmsg.DescribeCluster, min: 0, max: 2, handler: handleDescribeCluster},
	// ISR mode's (offset_for_leader_epoch.go, elect_leaders.go,
	// describe_log_dirs.go): v0–1 of OffsetForLeaderEpoch and v0 of
	// DescribeLogDirs dropped as by Kafka 4.0 (KIP-896); DescribeLogDirs v5
	// is KIP-1066's cordoned directories.
	{key: kmsg.OffsetForLeaderEpoch, min: 2, max: 4, handler: handleOffsetForLeaderEpoch},
	{key: kmsg.ElectLeaders, min: 0, max: 2, handler: handleElectLeaders},
	{key: kmsg.DescribeLogDirs, min: 1, max: 4, handler: handleDescribeLogDirs},
	// Partition reassignment (reassignments.go, KIP-455; v1 is KIP-860's
	// allow_replication_factor_change).
	{key: kmsg.AlterPartitionAssignments, min: 0, max: 1, handler: handleAlterPartitionReassignments},
	{key: kmsg.ListPartitionReassignments, min: 0, max: 0, handler: handleListPartitionReassignments},
	// Transactions (transactions.go): v4+ of AddPartitionsToTxn and EndTxn
	// are KIP-890's, not served.
	{key: kmsg.AddPartitionsToTxn, min: 0, max: 3, txn: true, handler: handleAddPartitionsToTxn},
	{key: kmsg.AddOffsetsToTxn, min: 0, max: 3, txn: true, handler: handleAddOffsetsToTxn},
	{key: kmsg.EndTxn, min: 0, max: 3, txn: true, handler: handleEndTxn},
	{key: kmsg.TxnOffsetCommit, min: 0, max: 3, txn: true, group: true, handler: handleTxnOffsetCommit},
	{key: kmsg.DescribeTransactions, min: 0, max: 0, txn: true, handler: handleDescribeTransactions},
	{key: kmsg.ListTransactions, min: 0, max: 1, txn: true, handler: handleListTransactions},
	{key: kmsg.WriteTxnMarkers, min: 0, max: 1, txn: true, handler: handleWriteTxnMarkers},
	{key: kmsg.SASLHandshake, min: 0, max: 1, sasl: true},
	{key: kmsg.SASLAuthenticate, min: 0, max: 2, sasl: true},
	{key: kmsg.DescribeUserSCRAMCredentials, min: 0, max: 0, credentials: true, handler: handleDescribeUserSCRAMCredentials},
	{key: kmsg.AlterUserSCRAMCredentials, min: 0, max: 0, credentials: true, handler: handleAlterUserSCRAMCredentials},
	// ACLs (acls.go): v0 dropped as by Kafka 4.0 (KIP-896).
	{key: kmsg.DescribeACLs, min: 1, max: 3, acls: true, handler: handleDescribeACLs},
	{key: kmsg.CreateACLs, min: 1, max: 3, acls: true, handler: handleCreateACLs},
	{key: kmsg.DeleteACLs, min: 1, max: 3, acls: true, handler: handleDeleteACLs},
	// Client quotas (quotas.go): advertised only when the server has a
	// quota store (Server.versionTable removes them otherwise).
	{key: kmsg.DescribeClientQuotas, min: 0, max: 1, handler: handleDescribeClientQuotas},
	{key: kmsg.AlterClientQuotas, min: 0, max: 1, handler: handleAlterClientQuotas},
}

// handlers is apis by key.
var handlers = func() [kmsg.MaxKey + 1]handler {
	var hs [kmsg.MaxKey + 1]handler
	for _, a := range apis {
		hs[a.key] = a.handler
	}
	return hs
}()

// supportedVersions is the table a listener with sec (nil: none)
// advertises; unserved keys have max −1.
func supportedVersions(withGroups, withTxns bool, sec *Security) [kmsg.MaxKey + 1]versionRange {
	var vs [kmsg.MaxKey + 1]versionRange
	for i := range vs {
		vs[i] = versionRange{min: 0, max: -1}
	}
	for _, a := range apis {
		if a.group && !withGroups || a.txn && !withTxns || a.sasl && !sec.SASL() || a.credentials && (sec == nil || sec.Credentials == nil) || a.acls && (sec == nil || sec.Authorizer == nil) {
			continue
		}
		vs[a.key] = versionRange{min: a.min, max: min(a.max, kmsg.RequestForKey(int16(a.key)).MaxVersion())}
	}
	return vs
}

func handleApiVersions(s *Server, _ context.Context, rq *request) finishFunc {
	resp := s.apiVersionsResponse(rq.conn.versions, rq.version, 0)
	return func(context.Context) kmsg.Response { return resp }
}

func (s *Server) apiVersionsResponse(versions *[kmsg.MaxKey + 1]versionRange, version, errorCode int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	resp.ErrorCode = errorCode
	for key, vr := range versions {
		if vr.max < 0 {
			continue
		}
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = int16(key), vr.min, vr.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}
