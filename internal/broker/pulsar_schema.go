package broker

// Pulsar schemas (pulsar.SchemaStore): each topic's list of schema versions
// as one JSON record in the metadata store, pulsarSchemaKey(topic), written
// by compare-and-swap so that concurrent registrations on several brokers
// append one after the other. The rules (what is equal, what compatible)
// are the front end's (internal/pulsar/schema.go); this only stores.
// Records are not deleted with their topic (the front end's deviation);
// the admin API's DELETE /admin/v2/schemas/{tenant}/{ns}/{topic}/schema
// removes one (deleteSchema), after which the topic has no schema.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"quire/internal/meta"
	"quire/internal/pulsar"
)

const pulsarSchemasPrefix = "/quire/pulsar/schemas/"

func pulsarSchemaKey(topic string) string { return pulsarSchemasPrefix + topic }

var _ pulsar.SchemaStore = (*pulsarBackend)(nil)

type pulsarSchemaRecord struct {
	Versions []pulsar.Schema `json:"versions"`
}

// checkSchemaTopic accepts the names schemas are kept under: persistent and
// non-persistent topics of valid namespaces.
func checkSchemaTopic(topic string) error {
	namesake, _ := persistentNamesake(topic)
	_, _, err := parsePulsarTopic(namesake)
	return err
}

// Schemas implements pulsar.SchemaStore.
func (pb *pulsarBackend) Schemas(ctx context.Context, topic string) ([]pulsar.Schema, error) {
	if err := checkSchemaTopic(topic); err != nil {
		return nil, err
	}
	var rec pulsarSchemaRecord
	if _, err := meta.GetJSON(ctx, pb.b.cfg.Store, pulsarSchemaKey(topic), &rec); err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return nil, nil
		}
		return nil, pulsarErr(fmt.Errorf("schemas of %s: %w", topic, err), pulsar.ErrMetadata)
	}
	return rec.Versions, nil
}

// AddSchema implements pulsar.SchemaStore.
func (pb *pulsarBackend) AddSchema(ctx context.Context, topic string, version int, s pulsar.Schema) error {
	if err := checkSchemaTopic(topic); err != nil {
		return err
	}
	store := pb.b.cfg.Store
	key := pulsarSchemaKey(topic)
	var rec pulsarSchemaRecord
	at, err := meta.GetJSON(ctx, store, key, &rec)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		at = 0
	case err != nil:
		return pulsarErr(fmt.Errorf("schemas of %s: %w", topic, err), pulsar.ErrMetadata)
	}
	if len(rec.Versions) != version {
		return fmt.Errorf("%w: %s has %d schema versions, not %d", pulsar.ErrSchemaConflict, topic, len(rec.Versions), version)
	}
	rec.Versions = append(rec.Versions, s)
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if at == 0 {
		_, err = store.Create(ctx, key, data)
	} else {
		_, err = store.Put(ctx, key, data, at)
	}
	if errors.Is(err, meta.ErrExists) || errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("%w: %s: %v", pulsar.ErrSchemaConflict, topic, err)
	}
	if err != nil {
		return pulsarErr(fmt.Errorf("add schema version %d of %s: %w", version, topic, err), pulsar.ErrMetadata)
	}
	return nil
}

// deleteSchema answers DELETE /admin/v2/schemas/{tenant}/{ns}/{topic}/schema:
// every version of the topic's schema is forgotten (Pulsar keeps a
// tombstone version; here the record goes). 200 with the version the next
// schema would get, as Pulsar answers {"version": n}.
func (a *pulsarAdmin) deleteSchema(w http.ResponseWriter, r *http.Request) error {
	topic := "persistent://" + r.PathValue("tenant") + "/" + r.PathValue("ns") + "/" + r.PathValue("topic")
	if err := checkSchemaTopic(topic); err != nil {
		return err
	}
	store := a.b.cfg.Store
	kv, err := store.Get(r.Context(), pulsarSchemaKey(topic))
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return restErrorf(http.StatusNotFound, "%s has no schema", topic)
	case err != nil:
		return err
	}
	if err := store.Delete(r.Context(), kv.Key, kv.Version); err != nil && !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int64{"version": 0})
	return nil
}

// getSchema answers GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schema
// (the latest version) and .../schema/{version}: what pulsar-admin schemas
// get and the clients' HTTP lookup read.
func (a *pulsarAdmin) getSchema(w http.ResponseWriter, r *http.Request) error {
	topic := pulsar.SchemaTopic("persistent://" + r.PathValue("tenant") + "/" + r.PathValue("ns") + "/" + r.PathValue("topic"))
	pb := a.b.pulsar.Load()
	if pb == nil {
		return restErrorf(http.StatusServiceUnavailable, "this broker serves no Pulsar listener")
	}
	versions, err := pb.Schemas(r.Context(), topic)
	if err != nil {
		return err
	}
	v := len(versions) - 1
	if s := r.PathValue("version"); s != "" {
		if v, err = strconv.Atoi(s); err != nil {
			return restErrorf(http.StatusPreconditionFailed, "schema version %q", s)
		}
	}
	if v < 0 || v >= len(versions) {
		return restErrorf(http.StatusNotFound, "%s has no schema version %d", topic, v)
	}
	s := versions[v]
	props := s.Properties
	if props == nil {
		props = map[string]string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"version": v, "type": pulsar.SchemaTypeName(s.Type),
		"timestamp": 0, "data": string(s.Data), "properties": props})
	return nil
}
