package kafka_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"quire/internal/auth"
	"quire/internal/kafka"
	"quire/internal/meta"
)

// aclCluster is a SASL listener with an authorizer on an ACL store: admin
// is the super user; alice and bob have no ACL yet.
type aclCluster struct {
	*cluster
	acls *auth.ACLStore
}

var aclPasswords = map[string]string{"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}

func newACLCluster(t *testing.T) *aclCluster {
	t.Helper()
	srv := meta.NewMemServer(meta.MemConfig{})
	store := srv.NewClient()
	t.Cleanup(func() { store.Close() })
	creds := auth.NewCredentials(store)
	for user, password := range aclPasswords {
		if _, err := creds.AddIfAbsent(context.Background(), user, password); err != nil {
			t.Fatal(err)
		}
	}
	acls, err := auth.OpenACLStore(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acls.Close)
	authorizer := auth.NewAuthorizer(acls, auth.AuthorizerConfig{SuperUsers: []auth.Principal{auth.User("admin")}})
	sec := kafka.Security{Mechanisms: auth.Mechanisms, Credentials: creds, FailedAuthenticationDelay: -1, Authorizer: authorizer}
	c := newClusterOn(t, func(ln net.Listener) net.Listener { return &kafka.Listener{Listener: ln, Security: sec} })
	return &aclCluster{cluster: c, acls: acls}
}

// as is a kgo client authenticated as user with SCRAM-SHA-512.
func (c *aclCluster) as(user string, opts ...kgo.Opt) *kgo.Client {
	mech := scram.Auth{User: user, Pass: aclPasswords[user]}.AsSha512Mechanism()
	return c.client(append([]kgo.Opt{kgo.SASL(mech)}, opts...)...)
}

// rawAs is a hand-driven connection authenticated as user.
func (c *aclCluster) rawAs(user string) *rawConn {
	c.t.Helper()
	r := c.raw()
	if resp := login(c.t, r, user, aclPasswords[user]); resp.ErrorCode != 0 {
		c.t.Fatalf("login %s: %v", user, kerr.ErrorForCode(resp.ErrorCode))
	}
	return r
}

func TestACLEnforcement(t *testing.T) {
	c := newACLCluster(t)
	ctx := testContext(t)
	admin := kadm.NewClient(c.as("admin"))
	for _, topic := range []string{"orders", "bobs"} {
		if _, err := admin.CreateTopic(ctx, 1, -1, nil, topic); err != nil {
			t.Fatalf("admin creates %s: %v", topic, err)
		}
	}
	grants := []*kadm.ACLBuilder{
		kadm.NewACLs().Allow("User:alice").Topics("orders").Operations(kadm.OpRead, kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral),
		kadm.NewACLs().Allow("User:alice").Groups("g").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral),
		kadm.NewACLs().Allow("User:bob").Topics("bob").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternPrefixed),
		kadm.NewACLs().Allow("User:bob").Groups("g").Operations(kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral),
	}
	for _, b := range grants {
		results, err := admin.CreateACLs(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range results {
			if r.Err != nil {
				t.Fatalf("create ACL %+v: %v", r, r.Err)
			}
		}
	}

	t.Run("alice produces and consumes in her group", func(t *testing.T) {
		producer := c.as("alice", kgo.DefaultProduceTopic("orders"))
		for _, v := range []string{"a", "b", "c"} {
			if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("alice produces: %v", err)
			}
		}
		// The in-memory backend runs no group membership: alice reads
		// partitions directly and commits as a simple consumer.
		consumer := c.as("alice", kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().AtStart()}}),
			kgo.FetchMaxWait(100*time.Millisecond))
		var got []string
		for len(got) < 3 {
			fetches := consumer.PollFetches(ctx)
			if err := fetches.Err(); err != nil {
				t.Fatalf("alice consumes: %v", err)
			}
			fetches.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		if !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("alice read %q", got)
		}
		adm := kadm.NewClient(c.as("alice"))
		commit := kadm.Offsets{}
		commit.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 3, LeaderEpoch: -1})
		if resp, err := adm.CommitOffsets(ctx, "g", commit); err != nil || resp.Error() != nil {
			t.Fatalf("alice commits: %v %v", err, resp.Error())
		}
		fetched, err := adm.FetchOffsets(ctx, "g")
		if err != nil {
			t.Fatalf("alice fetches offsets: %v", err)
		}
		if o, ok := fetched.Lookup("orders", 0); !ok || o.At != 3 {
			t.Fatalf("alice's committed offset: %+v", o)
		}
	})

	t.Run("bob is refused alice's topic by kgo", func(t *testing.T) {
		// bob may write bob* topics, so his idempotent producer gets an id.
		producer := c.as("bob", kgo.DefaultProduceTopic("orders"), kgo.RecordDeliveryTimeout(5*time.Second))
		err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr()
		if !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("bob produces to orders: %v, want TOPIC_AUTHORIZATION_FAILED", err)
		}
		if err := c.as("bob", kgo.DefaultProduceTopic("bobs")).ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("bob produces to his own topic: %v", err)
		}
	})

	t.Run("bob by hand", func(t *testing.T) {
		r := c.rawAs("bob")
		produce := kmsg.NewPtrProduceRequest()
		produce.Version, produce.Acks, produce.TimeoutMillis = 9, -1, 5000
		for _, topic := range []string{"orders", "bobs"} {
			pt := kmsg.NewProduceRequestTopic()
			pt.Topic = topic
			pp := kmsg.NewProduceRequestTopicPartition()
			pp.Records = recordBatch(t, 1, "raw")
			pt.Partitions = append(pt.Partitions, pp)
			produce.Topics = append(produce.Topics, pt)
		}
		presp := r.request(produce).(*kmsg.ProduceResponse)
		codes := map[string]int16{}
		for _, pt := range presp.Topics {
			codes[pt.Topic] = pt.Partitions[0].ErrorCode
		}
		expectCode(t, "produce orders", codes["orders"], kerr.TopicAuthorizationFailed)
		expectCode(t, "produce bobs", codes["bobs"], noError)

		fetch := kmsg.NewPtrFetchRequest()
		fetch.Version, fetch.MaxBytes = 12, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "orders"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		fetch.Topics = append(fetch.Topics, ft)
		fresp := r.request(fetch).(*kmsg.FetchResponse)
		expectCode(t, "fetch orders", fresp.Topics[0].Partitions[0].ErrorCode, kerr.TopicAuthorizationFailed)

		all := r.request(metadata()).(*kmsg.MetadataResponse)
		var names []string
		for _, mt := range all.Topics {
			names = append(names, *mt.Topic)
		}
		if slices.Contains(names, "orders") || !slices.Contains(names, "bobs") {
			t.Fatalf("bob's metadata of all topics lists %q: want bobs and not orders", names)
		}
		one := metadata()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr("orders")
		one.Topics = append(one.Topics, mt)
		oresp := r.request(one).(*kmsg.MetadataResponse)
		if len(oresp.Topics) != 1 || len(oresp.Topics[0].Partitions) != 0 {
			t.Fatalf("bob's metadata of orders: %+v", oresp.Topics)
		}
		expectCode(t, "metadata orders", oresp.Topics[0].ErrorCode, kerr.TopicAuthorizationFailed)

		// Auto-creation without CREATE: refused, and nothing is created.
		auto := metadata()
		at := kmsg.NewMetadataRequestTopic()
		at.Topic = kmsg.StringPtr("bob-auto")
		newTopic := kmsg.NewMetadataRequestTopic()
		newTopic.Topic = kmsg.StringPtr("other-auto")
		auto.Topics, auto.AllowAutoTopicCreation = append(auto.Topics, at, newTopic), true
		aresp := r.request(auto).(*kmsg.MetadataResponse)
		autoCodes := map[string]int16{}
		for _, t := range aresp.Topics {
			autoCodes[*t.Topic] = t.ErrorCode
		}
		if code := autoCodes["bob-auto"]; code != 0 && code != kerr.LeaderNotAvailable.Code {
			t.Fatalf("bob auto-creates bob-auto (ALL on bob*): %v", kerr.ErrorForCode(code))
		}
		expectCode(t, "auto-create other-auto", autoCodes["other-auto"], kerr.TopicAuthorizationFailed)

		join := kmsg.NewPtrJoinGroupRequest()
		join.Version, join.Group, join.ProtocolType = 9, "g", "consumer"
		join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 10000, 10000
		join.Protocols = append(join.Protocols, kmsg.JoinGroupRequestProtocol{Name: "range"})
		expectCode(t, "join g", r.request(join).(*kmsg.JoinGroupResponse).ErrorCode, kerr.GroupAuthorizationFailed)

		commit := kmsg.NewPtrOffsetCommitRequest()
		commit.Version, commit.Group, commit.Generation = 8, "g", -1
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.Topic = "bobs"
		ct.Partitions = append(ct.Partitions, kmsg.NewOffsetCommitRequestTopicPartition())
		commit.Topics = append(commit.Topics, ct)
		cresp := r.request(commit).(*kmsg.OffsetCommitResponse)
		expectCode(t, "commit to g", cresp.Topics[0].Partitions[0].ErrorCode, kerr.GroupAuthorizationFailed)

		// DESCRIBE on g: bob finds its coordinator and sees it listed.
		find := kmsg.NewPtrFindCoordinatorRequest()
		find.Version, find.CoordinatorKeys = 4, []string{"g", "h"}
		fcodes := map[string]int16{}
		for _, co := range r.request(find).(*kmsg.FindCoordinatorResponse).Coordinators {
			fcodes[co.Key] = co.ErrorCode
		}
		expectCode(t, "find coordinator g", fcodes["g"], noError)
		expectCode(t, "find coordinator h", fcodes["h"], kerr.GroupAuthorizationFailed)

		// DESCRIBE on g but not on orders: alice's committed offset of
		// orders (which the super user sees) is left out of an all-topics
		// fetch, in both layouts.
		if seen, err := admin.FetchOffsets(ctx, "g"); err != nil || len(seen) != 1 {
			t.Fatalf("admin fetches g's offsets: %v, %v", seen, err)
		}
		for _, version := range []int16{7, 8} {
			fetchOffsets := kmsg.NewPtrOffsetFetchRequest()
			fetchOffsets.Version, fetchOffsets.Group = version, "g"
			if version >= 8 {
				fetchOffsets.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g"}}
			}
			oresp := r.request(fetchOffsets).(*kmsg.OffsetFetchResponse)
			expectCode(t, "offset fetch g", oresp.ErrorCode, noError)
			topics := len(oresp.Topics)
			for _, g := range oresp.Groups {
				expectCode(t, "offset fetch g", g.ErrorCode, noError)
				topics += len(g.Topics)
			}
			if topics != 0 {
				t.Fatalf("bob's offset fetch v%d of g shows %d topics: %+v", version, topics, oresp)
			}
		}

		create := kmsg.NewPtrCreateACLsRequest()
		create.Version = 3
		create.Creations = append(create.Creations, kmsg.CreateACLsRequestCreation{
			ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "orders", ResourcePatternType: kmsg.ACLResourcePatternTypeLiteral,
			Principal: "User:bob", Host: "*", Operation: kmsg.ACLOperationAll, PermissionType: kmsg.ACLPermissionTypeAllow,
		})
		cr := r.request(create).(*kmsg.CreateACLsResponse)
		expectCode(t, "bob creates an ACL", cr.Results[0].ErrorCode, kerr.ClusterAuthorizationFailed)
	})

	t.Run("alice may not manage ACLs, admin may", func(t *testing.T) {
		results, err := kadm.NewClient(c.as("alice")).CreateACLs(ctx,
			kadm.NewACLs().Allow("User:alice").Topics("bobs").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))
		if err != nil {
			t.Fatal(err)
		}
		if len(results) != 1 || !errors.Is(results[0].Err, kerr.ClusterAuthorizationFailed) {
			t.Fatalf("alice creates an ACL: %+v", results)
		}
		described, err := admin.DescribeACLs(ctx, kadm.NewACLs().Allow("User:alice").AllowHosts().AnyResource().Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, d := range described {
			if d.Err != nil {
				t.Fatal(d.Err)
			}
			n += len(d.Described)
		}
		if n != 3 { // READ and WRITE on orders, READ on g
			t.Fatalf("admin describes %d of alice's ACLs, want 3: %+v", n, described)
		}
		deleted, err := admin.DeleteACLs(ctx, kadm.NewACLs().Allow("User:bob").AllowHosts().Topics("bob").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternPrefixed))
		if err != nil {
			t.Fatal(err)
		}
		if len(deleted) != 1 || deleted[0].Err != nil {
			t.Fatalf("admin deletes bob's grant: %+v", deleted)
		}
		// Effective at once on this broker.
		r := c.rawAs("bob")
		list := kmsg.NewPtrListOffsetsRequest()
		list.Version = 7
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "bobs"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp = -1
		lt.Partitions = append(lt.Partitions, lp)
		list.Topics = append(list.Topics, lt)
		lresp := r.request(list).(*kmsg.ListOffsetsResponse)
		expectCode(t, "list offsets of bobs after the delete", lresp.Topics[0].Partitions[0].ErrorCode, kerr.TopicAuthorizationFailed)
	})
}

// TestACLAPIsAdvertisedOnlyWithAnAuthorizer: without an authorizer the
// ACL APIs are not advertised and nothing is enforced.
func TestACLAPIsAdvertisedOnlyWithAnAuthorizer(t *testing.T) {
	aclKeys := []int16{int16(kmsg.CreateACLs), int16(kmsg.DescribeACLs), int16(kmsg.DeleteACLs)}
	plain := advertised(t, newCluster(t).raw())
	withACLs := advertised(t, newACLCluster(t).raw())
	for _, k := range aclKeys {
		if slices.Contains(plain, k) {
			t.Errorf("key %d advertised without an authorizer", k)
		}
		if !slices.Contains(withACLs, k) {
			t.Errorf("key %d not advertised with an authorizer", k)
		}
	}
}

// grant creates ACLs as the super user.
func (c *aclCluster) grant(t *testing.T, builders ...*kadm.ACLBuilder) {
	t.Helper()
	admin := kadm.NewClient(c.as("admin"))
	for _, b := range builders {
		results, err := admin.CreateACLs(testContext(t), b)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range results {
			if r.Err != nil {
				t.Fatalf("create ACL %+v: %v", r, r.Err)
			}
		}
	}
}

// TestACLAdminAPIs: topic administration, configs, groups, producer ids
// and credentials, each refused with Kafka's code where an ACL is missing
// and served where one allows it, in the same request.
func TestACLAdminAPIs(t *testing.T) {
	c := newACLCluster(t)
	ctx := testContext(t)
	admin := kadm.NewClient(c.as("admin"))
	if _, err := admin.CreateTopic(ctx, 1, -1, nil, "secret"); err != nil {
		t.Fatal(err)
	}
	commit := kadm.Offsets{}
	commit.Add(kadm.Offset{Topic: "secret", Partition: 0, At: 0, LeaderEpoch: -1})
	if resp, err := admin.CommitOffsets(ctx, "admins", commit); err != nil || resp.Error() != nil {
		t.Fatalf("admin commits: %v %v", err, resp.Error())
	}
	c.grant(t,
		kadm.NewACLs().Allow("User:bob").Topics("b-").Operations(kadm.OpCreate, kadm.OpDescribe, kadm.OpAlterConfigs).ResourcePatternType(kadm.ACLPatternPrefixed),
		kadm.NewACLs().Allow("User:bob").Topics("c-").Operations(kadm.OpCreate).ResourcePatternType(kadm.ACLPatternPrefixed),
		kadm.NewACLs().Allow("User:bob").Groups("bobs").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternLiteral),
	)
	if resp, err := kadm.NewClient(c.as("bob")).CommitOffsets(ctx, "bobs", kadm.Offsets{}); err != nil || resp.Error() != nil {
		t.Fatalf("bob commits nothing to his group: %v %v", err, resp)
	}
	r := c.rawAs("bob")

	create := kmsg.NewPtrCreateTopicsRequest()
	create.Version, create.TimeoutMillis = 7, 5000
	for _, name := range []string{"b-1", "x-1", "c-1"} {
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = name, 1, -1
		create.Topics = append(create.Topics, ct)
	}
	created := map[string]kmsg.CreateTopicsResponseTopic{}
	for _, t := range r.request(create).(*kmsg.CreateTopicsResponse).Topics {
		created[t.Topic] = t
	}
	expectCode(t, "create b-1", created["b-1"].ErrorCode, noError)
	expectCode(t, "create x-1", created["x-1"].ErrorCode, kerr.TopicAuthorizationFailed)
	expectCode(t, "create c-1", created["c-1"].ErrorCode, noError)
	if len(created["b-1"].Configs) == 0 {
		t.Error("b-1 created without its configs, though bob may describe them")
	}
	if c1 := created["c-1"]; len(c1.Configs) != 0 || c1.ConfigErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Errorf("c-1's configs shown to bob, who may not describe them: %d configs, code %d", len(c1.Configs), c1.ConfigErrorCode)
	}

	describe := kmsg.NewPtrDescribeConfigsRequest()
	describe.Version = 4
	for _, res := range []struct {
		rtype kmsg.ConfigResourceType
		name  string
	}{{kmsg.ConfigResourceTypeTopic, "b-1"}, {kmsg.ConfigResourceTypeTopic, "secret"}, {kmsg.ConfigResourceTypeBroker, "1"}} {
		dr := kmsg.NewDescribeConfigsRequestResource()
		dr.ResourceType, dr.ResourceName = res.rtype, res.name
		describe.Resources = append(describe.Resources, dr)
	}
	described := map[string]int16{}
	for _, res := range r.request(describe).(*kmsg.DescribeConfigsResponse).Resources {
		described[res.ResourceName] = res.ErrorCode
	}
	expectCode(t, "describe configs b-1", described["b-1"], noError)
	expectCode(t, "describe configs secret", described["secret"], kerr.TopicAuthorizationFailed)
	expectCode(t, "describe configs broker", described["1"], kerr.ClusterAuthorizationFailed)

	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	alter.Version = 1
	for _, name := range []string{"b-1", "secret"} {
		ar := kmsg.NewIncrementalAlterConfigsRequestResource()
		ar.ResourceType, ar.ResourceName = kmsg.ConfigResourceTypeTopic, name
		ar.Configs = append(ar.Configs, kmsg.IncrementalAlterConfigsRequestResourceConfig{Name: "retention.ms", Op: kmsg.IncrementalAlterConfigOpSet, Value: kmsg.StringPtr("60000")})
		alter.Resources = append(alter.Resources, ar)
	}
	altered := map[string]int16{}
	for _, res := range r.request(alter).(*kmsg.IncrementalAlterConfigsResponse).Resources {
		altered[res.ResourceName] = res.ErrorCode
	}
	expectCode(t, "alter configs b-1", altered["b-1"], noError)
	expectCode(t, "alter configs secret", altered["secret"], kerr.TopicAuthorizationFailed)

	grow := kmsg.NewPtrCreatePartitionsRequest()
	grow.Version, grow.TimeoutMillis = 3, 5000
	grow.Topics = append(grow.Topics, kmsg.CreatePartitionsRequestTopic{Topic: "b-1", Count: 2})
	expectCode(t, "create partitions b-1 without ALTER", r.request(grow).(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode, kerr.TopicAuthorizationFailed)

	del := kmsg.NewPtrDeleteTopicsRequest()
	del.Version, del.TimeoutMillis = 6, 5000
	del.Topics = append(del.Topics, kmsg.DeleteTopicsRequestTopic{Topic: kmsg.StringPtr("b-1")})
	expectCode(t, "delete b-1 without DELETE", r.request(del).(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode, kerr.TopicAuthorizationFailed)

	meta := metadata()
	meta.IncludeTopicAuthorizedOperations = true
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("b-1")
	meta.Topics = append(meta.Topics, mt)
	mresp := r.request(meta).(*kmsg.MetadataResponse)
	expectCode(t, "metadata b-1", mresp.Topics[0].ErrorCode, noError)
	wantOps := int32(1<<auth.OpCreate | 1<<auth.OpDescribe | 1<<auth.OpAlterConfigs | 1<<auth.OpDescribeConfigs)
	if got := mresp.Topics[0].AuthorizedOperations; got != wantOps {
		t.Errorf("bob's authorized operations on b-1: %v, want %v", kadm.DecodeACLOperations(got), kadm.DecodeACLOperations(wantOps))
	}

	pid := kmsg.NewPtrInitProducerIDRequest()
	pid.Version = 4
	expectCode(t, "idempotent producer id without any WRITE", r.request(pid).(*kmsg.InitProducerIDResponse).ErrorCode, kerr.ClusterAuthorizationFailed)

	groups := kmsg.NewPtrDescribeGroupsRequest()
	groups.Version, groups.Groups = 5, []string{"admins", "bobs"}
	gcodes := map[string]int16{}
	for _, g := range r.request(groups).(*kmsg.DescribeGroupsResponse).Groups {
		gcodes[g.Group] = g.ErrorCode
	}
	expectCode(t, "describe group admins", gcodes["admins"], kerr.GroupAuthorizationFailed)
	expectCode(t, "describe group bobs", gcodes["bobs"], noError)

	listed, err := kadm.NewClient(c.as("bob")).ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names := listed.Groups(); slices.Contains(names, "admins") {
		t.Errorf("bob lists the admins group: %v", names)
	}
	if all, err := admin.ListGroups(ctx); err != nil || !slices.Contains(all.Groups(), "admins") {
		t.Errorf("the super user does not list the admins group: %v %v", all, err)
	}

	delGroups := kmsg.NewPtrDeleteGroupsRequest()
	delGroups.Version, delGroups.Groups = 2, []string{"admins"}
	expectCode(t, "delete group admins", r.request(delGroups).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode, kerr.GroupAuthorizationFailed)

	creds := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	expectCode(t, "bob describes credentials", r.request(creds).(*kmsg.DescribeUserSCRAMCredentialsResponse).ErrorCode, kerr.ClusterAuthorizationFailed)
	if described, err := admin.DescribeUserSCRAMs(ctx); err != nil || described.Error() != nil {
		t.Errorf("the super user describes credentials: %v %v", err, described.Error())
	}
}
