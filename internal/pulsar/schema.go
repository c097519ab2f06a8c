package pulsar

// Schemas: GET_SCHEMA, GET_OR_CREATE_SCHEMA, and the schema a PRODUCER or
// SUBSCRIBE carries.
//
// A topic's schema is a list of versions (0, 1, …) kept by the Backend's
// SchemaStore; a partitioned topic's partitions share their topic's list,
// as in Pulsar. On the wire a version is 8 bytes, big-endian (Pulsar's
// LongSchemaVersion). Registering a schema (GET_OR_CREATE_SCHEMA, or a
// producer or consumer that names one) answers the version of an equal
// stored schema (same type, definition and properties), else appends it as
// a new version if it is compatible.
//
// Deviations from Apache Pulsar:
//   - compatibility: a schema of another type than the latest version is
//     refused (IncompatibleSchema); a new definition of the same type is
//     always accepted (Pulsar's ALWAYS_COMPATIBLE within a type; its
//     default, FULL, would also check Avro and JSON definitions field by
//     field, which is not done here);
//   - producers and consumers without a schema (bytes) are accepted on any
//     topic, as Pulsar does unless schemaValidationEnforced;
//   - schemas are not deleted with their topic, and there is no admin API
//     for them;
//   - a Backend without a SchemaStore refuses schemas (NotAllowed).

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

// ErrIncompatibleSchema refuses a schema that the topic's schemas do not
// allow (ServerError IncompatibleSchema).
var ErrIncompatibleSchema = errors.New("pulsar: incompatible schema")

// ErrSchemaConflict is what SchemaStore.AddSchema returns when the topic's
// versions changed since they were read: the caller reads them again.
var ErrSchemaConflict = errors.New("pulsar: schema changed concurrently")

// Schema is one version of a topic's schema.
type Schema struct {
	Type       int32             `json:"type"` // pb.Schema_Type
	Name       string            `json:"name,omitempty"`
	Data       []byte            `json:"data,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
}

// SchemaStore keeps topics' schemas. A Backend that implements it serves
// schemas; names are of non-partitioned topics or partitioned topics (never
// of a partition).
type SchemaStore interface {
	// Schemas returns topic's schema versions, version 0 first; none when
	// it has no schema.
	Schemas(ctx context.Context, topic string) ([]Schema, error)
	// AddSchema stores s as version `version` of topic's schema, which must
	// be the number of versions it has now: ErrSchemaConflict otherwise.
	AddSchema(ctx context.Context, topic string, version int, s Schema) error
}

// maxSchemaAttempts bounds the retries of a registration that keeps losing
// to concurrent ones.
const maxSchemaAttempts = 10

func schemaOf(s *pb.Schema) Schema {
	out := Schema{Type: int32(s.GetType()), Name: s.GetName(), Data: s.GetSchemaData()}
	for _, kv := range s.GetProperties() {
		if out.Properties == nil {
			out.Properties = map[string]string{}
		}
		out.Properties[kv.GetKey()] = kv.GetValue()
	}
	return out
}

func (s Schema) proto() *pb.Schema {
	out := &pb.Schema{Name: proto.String(s.Name), SchemaData: s.Data, Type: pb.Schema_Type(s.Type).Enum()}
	if out.SchemaData == nil {
		out.SchemaData = []byte{}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		out.Properties = append(out.Properties, &pb.KeyValue{Key: proto.String(k), Value: proto.String(s.Properties[k])})
	}
	return out
}

func (s Schema) equal(o Schema) bool {
	return s.Type == o.Type && string(s.Data) == string(o.Data) && maps.Equal(s.Properties, o.Properties)
}

func schemaVersionBytes(v int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// schemaTopic is the name a topic's schemas are kept under: a partition's
// are its partitioned topic's.
func schemaTopic(topic string) string {
	if partitionIndexOf(topic) >= 0 {
		return topic[:strings.LastIndex(topic, "-partition-")]
	}
	return topic
}

// schemaStore is the Backend's SchemaStore, nil when it has none.
func (s *Server) schemaStore() SchemaStore {
	store, _ := s.backend.(SchemaStore)
	return store
}

// registerSchema returns the version of schema for topic, adding it when
// no stored version equals it.
func (s *Server) registerSchema(ctx context.Context, topic string, schema Schema) (int, error) {
	store := s.schemaStore()
	if store == nil {
		return 0, errorf(ErrNotAllowed, "this broker keeps no schemas")
	}
	topic = schemaTopic(topic)
	for range maxSchemaAttempts {
		versions, err := store.Schemas(ctx, topic)
		if err != nil {
			return 0, err
		}
		for v, stored := range versions {
			if stored.equal(schema) {
				return v, nil
			}
		}
		if n := len(versions); n > 0 && versions[n-1].Type != schema.Type {
			return 0, errorf(ErrIncompatibleSchema, "topic %s has a %s schema; %s is incompatible with it",
				topic, pb.Schema_Type(versions[n-1].Type), pb.Schema_Type(schema.Type))
		}
		err = store.AddSchema(ctx, topic, len(versions), schema)
		if errors.Is(err, ErrSchemaConflict) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return len(versions), nil
	}
	return 0, errorf(ErrTooManyRequests, "schema of %s: too many concurrent changes", topic)
}

func (c *conn) handleGetSchema(cmd *pb.CommandGetSchema) error {
	resp := &pb.CommandGetSchemaResponse{RequestId: proto.Uint64(cmd.GetRequestId())}
	fail := func(err error) error {
		resp.ErrorCode = c.errorCode(err, "get schema", "topic", cmd.GetTopic()).Enum()
		resp.ErrorMessage = proto.String(err.Error())
		return c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA_RESPONSE.Enum(), GetSchemaResponse: resp})
	}
	if err := c.authorizeTopic(cmd.GetTopic(), ActionLookup); err != nil {
		return fail(err)
	}
	store := c.s.schemaStore()
	if store == nil {
		return fail(errorf(ErrNotAllowed, "this broker keeps no schemas"))
	}
	topic := schemaTopic(CanonicalTopic(cmd.GetTopic()))
	versions, err := store.Schemas(c.ctx, topic)
	if err != nil {
		return fail(err)
	}
	v := len(versions) - 1
	if raw := cmd.GetSchemaVersion(); len(raw) > 0 {
		if len(raw) != 8 {
			return fail(errorf(ErrNotAllowed, "schema version of %d bytes (want 8)", len(raw)))
		}
		v = int(int64(binary.BigEndian.Uint64(raw)))
	}
	if v < 0 || v >= len(versions) {
		// Pulsar's answer when there is no such schema.
		return fail(errorf(ErrTopicNotFound, "topic %s has no schema version %d", topic, v))
	}
	resp.Schema = versions[v].proto()
	resp.SchemaVersion = schemaVersionBytes(v)
	return c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA_RESPONSE.Enum(), GetSchemaResponse: resp})
}

func (c *conn) handleGetOrCreateSchema(cmd *pb.CommandGetOrCreateSchema) error {
	resp := &pb.CommandGetOrCreateSchemaResponse{RequestId: proto.Uint64(cmd.GetRequestId())}
	var v int
	err := c.authorizeTopic(cmd.GetTopic(), ActionLookup)
	if err == nil {
		v, err = c.s.registerSchema(c.ctx, CanonicalTopic(cmd.GetTopic()), schemaOf(cmd.GetSchema()))
	}
	if err != nil {
		resp.ErrorCode = c.errorCode(err, "get or create schema", "topic", cmd.GetTopic()).Enum()
		resp.ErrorMessage = proto.String(err.Error())
	} else {
		resp.SchemaVersion = schemaVersionBytes(v)
	}
	return c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE.Enum(), GetOrCreateSchemaResponse: resp})
}

// attachSchema registers the schema a PRODUCER or SUBSCRIBE names (none:
// nothing to do) and returns its version's wire form, nil without one.
func (c *conn) attachSchema(topic string, schema *pb.Schema) ([]byte, error) {
	if schema == nil || (schema.GetType() == pb.Schema_None && len(schema.GetSchemaData()) == 0) {
		return nil, nil
	}
	v, err := c.s.registerSchema(c.ctx, topic, schemaOf(schema))
	if err != nil {
		return nil, err
	}
	return schemaVersionBytes(v), nil
}

// SchemaTypeName is a schema type as Pulsar's admin API spells it (the
// REST schema endpoints' "type": STRING, JSON, AVRO, BOOLEAN, KEY_VALUE…).
func SchemaTypeName(t int32) string {
	switch pb.Schema_Type(t) {
	case pb.Schema_Bool:
		return "BOOLEAN"
	case pb.Schema_KeyValue:
		return "KEY_VALUE"
	case pb.Schema_ProtobufNative:
		return "PROTOBUF_NATIVE"
	case pb.Schema_LocalDate:
		return "LOCAL_DATE"
	case pb.Schema_LocalTime:
		return "LOCAL_TIME"
	case pb.Schema_LocalDateTime:
		return "LOCAL_DATE_TIME"
	}
	return strings.ToUpper(pb.Schema_Type(t).String())
}

// SchemaTopic is the name a topic's schemas are kept under (a partition's
// are its partitioned topic's).
func SchemaTopic(topic string) string { return schemaTopic(topic) }
