package broker

// Pulsar's admin REST API v2 (the paths and JSON of Apache Pulsar's
// /admin/v2), served on the HTTP port beside /metrics.
//
// Served:
//   - tenants: GET /admin/v2/tenants, GET/PUT/POST/DELETE /admin/v2/tenants/{t};
//   - namespaces: GET /admin/v2/namespaces/{t}, GET/PUT/DELETE
//     /admin/v2/namespaces/{t}/{ns}, GET/POST .../persistence, .../retention,
//     .../messageTTL, .../deduplication (DELETE resets the last three),
//     POST/DELETE .../backlogQuota (?backlogQuotaType=destination_storage|
//     message_age), GET .../backlogQuotaMap (and GET .../backlogQuota, the
//     same map), GET .../bundles, PUT .../{bundle}/unload and PUT .../unload,
//     GET .../permissions, POST and DELETE .../permissions/{role} (PUT
//     cannot be told from PUT .../{bundle}/unload);
//   - topics (persistent:// only): GET /admin/v2/persistent/{t}/{ns} (every
//     non-partitioned topic and partition), GET .../{ns}/partitioned,
//     PUT/DELETE .../{topic}, PUT/GET/POST/DELETE .../{topic}/partitions,
//     GET .../{topic}/stats, .../internalStats, .../partitioned-stats
//     (pulsar_admin_stats.go; namespaces are in pulsar_admin_namespaces.go,
//     subscriptions in pulsar_admin_subscriptions.go);
//   - subscriptions: GET .../{topic}/subscriptions, PUT/DELETE
//     .../subscription/{sub}, POST .../subscription/{sub}/skip/{n},
//     .../resetcursor/{timestamp}, .../resetcursor (a message id body),
//     .../expireMessages/{seconds}; on a partitioned topic each applies to
//     every partition;
//   - messages: GET .../{topic}/ledger/{ledger}/entry/{entry} (one entry by
//     its message id); PUT .../{topic}/unload (every partition of a
//     partitioned topic): the topic is closed, its clients look it up again
//     and the owner loads it afresh;
//   - schemas: GET /admin/v2/schemas/{t}/{ns}/{topic}/schema (and
//     .../schema/{version}), DELETE .../schema (pulsar_schema.go).
//
// Authentication and authorization (when the broker has them) are in
// pulsar_auth.go: each route names the access it needs.
//
// Errors answer as Pulsar's do: a JSON body {"reason": "..."} with 401 and
// 403 for credentials missing and permissions lacking, 404 for
// what does not exist, 409 for what exists already (or is not empty), 412
// for a precondition (a bad name or policy, a subscription with consumers,
// a Kafka topic), 503 when ownership is in flux.
//
// Where: catalogue operations (tenants, namespaces, partitioned-topic
// records) are served by any broker. An operation on one topic's data is
// served by the owner of its bundle: another broker answers 307 with the
// owner's HTTP address (Pulsar's redirect; pulsar-admin and the Go and
// Java admin clients follow it). Operations spanning partitions owned by
// several brokers (partitioned-stats, a partitioned topic's subscription
// operations, delete) are served here: the local partitions directly, the
// others by calling their owners' API.
//
// Deviations from Apache Pulsar:
//   - namespace policy changes apply when a topic is next loaded (an unload,
//     a takeover or a restart), not at once;
//   - one backlog-quota policy serves both quota types (the catalogue keeps
//     one), so setting either type's policy sets both;
//   - the subscription type of a subscription without consumers since the
//     topic was loaded is reported as Exclusive;
//   - skip counts entries (a batch is one), as Pulsar's cursor does, and is
//     refused on non-durable subscriptions;
//   - deleting a partitioned topic removes its remote partitions with
//     force (their producers and consumers are closed);
//   - deleting a topic while a client reconnects may race: the client can
//     load the topic again between its close and the deletion of its
//     storage (Pulsar fences the topic first).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"quire/internal/catalog"
	"quire/internal/meta"
	"quire/internal/mlog"
	"quire/internal/mlog/mlogclient"
	"quire/internal/ownership"
	"quire/internal/pulsar"
)

const (
	// pulsarAdminMaxBody bounds a request body.
	pulsarAdminMaxBody = 1 << 20
	// pulsarAdminForwardTimeout bounds a call to another broker's API.
	pulsarAdminForwardTimeout = 30 * time.Second
	// maxRangesWalk bounds the unacknowledged entries walked to list a
	// cursor's acknowledged ranges (internalStats).
	maxRangesWalk = 10_000
)

// restError is an answer with its HTTP status.
type restError struct {
	status int
	reason string
}

func (e *restError) Error() string { return e.reason }

func restErrorf(status int, format string, args ...any) error {
	return &restError{status: status, reason: fmt.Sprintf(format, args...)}
}

// statusOf maps an error to Pulsar's HTTP status, once.
func statusOf(err error) int {
	var re *restError
	switch {
	case errors.As(err, &re):
		return re.status
	case errors.Is(err, catalog.ErrTenantNotFound), errors.Is(err, catalog.ErrNamespaceNotFound),
		errors.Is(err, catalog.ErrTopicNotFound), errors.Is(err, pulsar.ErrTopicNotFound),
		errors.Is(err, pulsar.ErrSubscriptionNotFound), errors.Is(err, mlog.ErrNoSuchCursor):
		return http.StatusNotFound
	case errors.Is(err, catalog.ErrTenantExists), errors.Is(err, catalog.ErrNamespaceExists),
		errors.Is(err, catalog.ErrTopicExists), errors.Is(err, catalog.ErrNotEmpty), errors.Is(err, catalog.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, catalog.ErrInvalidName), errors.Is(err, catalog.ErrInvalidTopicName),
		errors.Is(err, catalog.ErrInvalidPolicies), errors.Is(err, catalog.ErrInvalidPartitions),
		errors.Is(err, pulsar.ErrInvalidTopicName), errors.Is(err, pulsar.ErrNotAllowed):
		return http.StatusPreconditionFailed
	case errors.Is(err, pulsar.ErrServiceNotReady), errors.Is(err, ownership.ErrNotOwner),
		errors.Is(err, ownership.ErrClosed), errors.Is(err, ownership.ErrSessionLost),
		errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// pulsarAdmin serves the API for one broker.
type pulsarAdmin struct {
	b      *Broker
	client *http.Client
}

// PulsarAdmin returns the handler of Pulsar's admin REST API (paths under
// /admin/v2/) and of its HTTP lookup (/lookup/v2/), for the HTTP server.
func (b *Broker) PulsarAdmin() http.Handler {
	a := &pulsarAdmin{b: b, client: &http.Client{Timeout: pulsarAdminForwardTimeout}}
	mux := http.NewServeMux()
	// h serves pattern with f for roles that have the access need
	// (pulsar_auth.go).
	h := func(pattern string, need access, f func(w http.ResponseWriter, r *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			r, err := a.authorizeAdmin(r, need)
			if err == nil {
				err = f(w, r)
			}
			if err != nil {
				status := statusOf(err)
				if status == http.StatusInternalServerError {
					b.log.Warn("pulsar admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
				}
				writeJSON(w, status, map[string]string{"reason": err.Error()})
			}
		})
	}
	const ns = "/admin/v2/namespaces/{tenant}/{ns}"
	const topic = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
	h("GET /admin/v2/tenants", accessSuperUser, a.listTenants)
	h("GET /admin/v2/tenants/{tenant}", accessTenantAdmin, a.getTenant)
	h("PUT /admin/v2/tenants/{tenant}", accessSuperUser, a.createTenant)
	h("DELETE /admin/v2/tenants/{tenant}", accessSuperUser, a.deleteTenant)
	h("POST /admin/v2/tenants/{tenant}", accessSuperUser, a.updateTenant)

	h("GET /admin/v2/namespaces/{tenant}", accessTenantAdmin, a.listNamespaces)
	h("GET "+ns, accessTenantAdmin, a.getPolicies)
	h("PUT "+ns, accessTenantAdmin, a.createNamespace)
	h("DELETE "+ns, accessTenantAdmin, a.deleteNamespace)
	h("GET "+ns+"/persistence", accessTenantAdmin, a.getPersistence)
	h("POST "+ns+"/persistence", accessTenantAdmin, a.setPersistence)
	h("GET "+ns+"/retention", accessTenantAdmin, a.getRetention)
	h("POST "+ns+"/retention", accessTenantAdmin, a.setRetention)
	h("GET "+ns+"/backlogQuotaMap", accessTenantAdmin, a.getBacklogQuota)
	h("GET "+ns+"/backlogQuota", accessTenantAdmin, a.getBacklogQuota)
	h("POST "+ns+"/backlogQuota", accessTenantAdmin, a.setBacklogQuota)
	h("DELETE "+ns+"/backlogQuota", accessTenantAdmin, a.removeBacklogQuota)
	h("GET "+ns+"/messageTTL", accessTenantAdmin, a.getMessageTTL)
	h("POST "+ns+"/messageTTL", accessTenantAdmin, a.setMessageTTL)
	h("DELETE "+ns+"/messageTTL", accessTenantAdmin, a.removeMessageTTL)
	h("GET "+ns+"/deduplication", accessTenantAdmin, a.getDeduplication)
	h("POST "+ns+"/deduplication", accessTenantAdmin, a.setDeduplication)
	h("DELETE "+ns+"/deduplication", accessTenantAdmin, a.removeDeduplication)
	h("GET "+ns+"/bundles", accessTenantAdmin, a.getBundles)
	h("PUT "+ns+"/unload", accessTenantAdmin, a.unloadNamespace)
	h("PUT "+ns+"/{bundle}/unload", accessTenantAdmin, a.unloadBundle)
	h("GET "+ns+"/permissions", accessTenantAdmin, a.getPermissions)
	h("POST "+ns+"/permissions/{role}", accessTenantAdmin, a.grantPermission)
	h("DELETE "+ns+"/permissions/{role}", accessTenantAdmin, a.revokePermission)

	h("GET /admin/v2/persistent/{tenant}/{ns}", accessLookup, a.listTopics)
	h("GET /admin/v2/namespaces/{tenant}/{ns}/topics", accessLookup, a.listTopics) // the HTTP lookup's GetTopicsOfNamespace
	h("GET /lookup/v2/topic/persistent/{tenant}/{ns}/{topic}", accessLookup, a.lookup)
	h("GET /admin/v2/persistent/{tenant}/{ns}/partitioned", accessLookup, a.listPartitioned)
	h("PUT "+topic, accessTenantAdmin, a.createTopic)
	h("DELETE "+topic, accessTenantAdmin, a.deleteTopic)
	h("PUT "+topic+"/partitions", accessTenantAdmin, a.createPartitioned)
	h("GET "+topic+"/partitions", accessLookup, a.getPartitions)
	h("POST "+topic+"/partitions", accessTenantAdmin, a.updatePartitions)
	h("DELETE "+topic+"/partitions", accessTenantAdmin, a.deletePartitioned)
	h("GET "+topic+"/stats", accessLookup, a.stats)
	h("GET "+topic+"/internalStats", accessLookup, a.internalStats)
	h("GET "+topic+"/partitioned-stats", accessLookup, a.partitionedStats)
	h("GET "+topic+"/subscriptions", accessConsume, a.listSubscriptions)
	h("PUT "+topic+"/subscription/{sub}", accessConsume, a.createSubscription)
	h("DELETE "+topic+"/subscription/{sub}", accessConsume, a.deleteSubscription)
	h("POST "+topic+"/subscription/{sub}/skip/{n}", accessConsume, a.skip)
	h("POST "+topic+"/subscription/{sub}/resetcursor/{timestamp}", accessConsume, a.resetByTime)
	h("POST "+topic+"/subscription/{sub}/resetcursor", accessConsume, a.resetByID)
	h("POST "+topic+"/subscription/{sub}/expireMessages/{seconds}", accessConsume, a.expire)
	h("GET "+topic+"/ledger/{ledger}/entry/{entry}", accessConsume, a.getMessageByID)
	h("PUT "+topic+"/unload", accessTenantAdmin, a.unloadTopic)
	h("POST "+topic+"/terminate", accessTenantAdmin, a.terminate)
	h("DELETE /admin/v2/schemas/{tenant}/{ns}/{topic}/schema", accessTenantAdmin, a.deleteSchema)
	h("GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schema", accessLookup, a.getSchema)
	h("GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schema/{version}", accessLookup, a.getSchema)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away
}

func noContent(w http.ResponseWriter) error {
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// readBody reads a request's body, bounded.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, pulsarAdminMaxBody))
	if err != nil {
		return nil, restErrorf(http.StatusBadRequest, "read the body: %v", err)
	}
	return bytes.TrimSpace(body), nil
}

// decodeBody decodes a JSON body into v; an empty body leaves v alone
// unless required.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, required bool) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	if len(body) == 0 {
		if required {
			return restErrorf(http.StatusBadRequest, "a JSON body is required")
		}
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return restErrorf(http.StatusBadRequest, "bad JSON body: %v", err)
	}
	return nil
}

// --- tenants ---

func (a *pulsarAdmin) listTenants(w http.ResponseWriter, r *http.Request) error {
	ts, err := a.b.admin.ListTenants(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(ts))
	return nil
}

type tenantInfoJSON struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

func (a *pulsarAdmin) getTenant(w http.ResponseWriter, r *http.Request) error {
	info, err := a.b.admin.GetTenant(r.Context(), r.PathValue("tenant"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, tenantInfoJSON{AdminRoles: nonNil(info.AdminRoles), AllowedClusters: []string{a.b.cfg.ClusterID}})
	return nil
}

func (a *pulsarAdmin) createTenant(w http.ResponseWriter, r *http.Request) error {
	var body tenantInfoJSON
	if err := decodeBody(w, r, &body, false); err != nil {
		return err
	}
	err := a.b.admin.CreateTenant(r.Context(), r.PathValue("tenant"), catalog.TenantInfo{AdminRoles: body.AdminRoles, Created: time.Now().UTC()})
	if err != nil {
		return err
	}
	return noContent(w)
}

// updateTenant replaces a tenant's admin roles (pulsar-admin tenants
// update).
func (a *pulsarAdmin) updateTenant(w http.ResponseWriter, r *http.Request) error {
	var body tenantInfoJSON
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	_, err := a.b.admin.UpdateTenant(r.Context(), r.PathValue("tenant"), func(info *catalog.TenantInfo) error {
		info.AdminRoles = body.AdminRoles
		return nil
	})
	if err != nil {
		return err
	}
	return noContent(w)
}

func (a *pulsarAdmin) deleteTenant(w http.ResponseWriter, r *http.Request) error {
	if err := a.b.admin.DeleteTenant(r.Context(), r.PathValue("tenant")); err != nil {
		return err
	}
	return noContent(w)
}

// --- routing to the owner ---

// redirect answers 307 with the owner's address.
func (a *pulsarAdmin) redirect(w http.ResponseWriter, r *http.Request, owner ownership.Member) error {
	if owner.HTTPAddr == "" {
		return restErrorf(http.StatusServiceUnavailable, "owned by broker %d, which serves no HTTP address", owner.ID)
	}
	http.Redirect(w, r, "http://"+owner.HTTPAddr+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	return nil
}

// forward calls another broker's API and returns the answer's body; an
// error status comes back as a restError with the owner's reason.
func (a *pulsarAdmin) forward(ctx context.Context, method string, owner ownership.Member, pathAndQuery string, body []byte) ([]byte, error) {
	if owner.HTTPAddr == "" {
		return nil, restErrorf(http.StatusServiceUnavailable, "broker %d serves no HTTP address", owner.ID)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+owner.HTTPAddr+pathAndQuery, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	if h, ok := ctx.Value(authorizationKey{}).(string); ok {
		req.Header.Set("Authorization", h) // the client's credentials (pulsar_auth.go)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, restErrorf(http.StatusServiceUnavailable, "broker %d: %v", owner.ID, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, restErrorf(http.StatusServiceUnavailable, "broker %d: %v", owner.ID, err)
	}
	if resp.StatusCode >= 300 {
		var reason struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(out, &reason) != nil || reason.Reason == "" {
			reason.Reason = strings.TrimSpace(string(out))
		}
		return nil, &restError{status: resp.StatusCode, reason: fmt.Sprintf("broker %d: %s", owner.ID, reason.Reason)}
	}
	return out, nil
}

// backend is the Pulsar backend (503 without a Pulsar listener).
func (a *pulsarAdmin) backend() (*pulsarBackend, error) {
	pb := a.b.pulsar.Load()
	if pb == nil {
		return nil, restErrorf(http.StatusServiceUnavailable, "broker %d serves no Pulsar listener", a.b.ID())
	}
	return pb, nil
}

// ownerOf is the broker owning the topic's bundle (assigned now when none
// does).
func (a *pulsarAdmin) ownerOf(ctx context.Context, name string) (*pulsarBackend, ownership.Member, error) {
	pb, err := a.backend()
	if err != nil {
		return nil, ownership.Member{}, err
	}
	owner, err := pb.owner(ctx, name)
	return pb, owner, err
}

// topicParts is the request's topic: its full name, namespace, local name
// and partition count (0: not partitioned).
type topicParts struct {
	name, ns, local string
	partitions      int
}

func (a *pulsarAdmin) topicOf(r *http.Request) (topicParts, error) {
	name := "persistent://" + r.PathValue("tenant") + "/" + r.PathValue("ns") + "/" + r.PathValue("topic")
	ns, local, err := parsePulsarTopic(name)
	if err != nil {
		return topicParts{}, err
	}
	tp := topicParts{name: name, ns: ns, local: local}
	rec, err := a.b.admin.GetTopic(r.Context(), ns, local)
	switch {
	case errors.Is(err, catalog.ErrTopicNotFound):
	case err != nil:
		return topicParts{}, err
	case !isPulsarTopic(rec):
		return topicParts{}, kafkaTopicErr(name)
	default:
		tp.partitions = int(rec.Partitions)
	}
	return tp, nil
}

func (tp topicParts) partition(i int) string { return fmt.Sprintf("%s-partition-%d", tp.name, i) }

// partitionPath is the request's path and query with the topic replaced
// by its partition i.
func (tp topicParts) partitionPath(r *http.Request, i int) string {
	prefix := "/admin/v2/persistent/" + tp.ns + "/" + tp.local
	rest := strings.TrimPrefix(r.URL.Path, prefix)
	path := prefix + fmt.Sprintf("-partition-%d", i) + rest
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	return path
}

// servedTopic returns the loaded topic when this broker owns it; nil
// after answering with a redirect.
func (a *pulsarAdmin) servedTopic(w http.ResponseWriter, r *http.Request, name string) (*pulsarTopic, error) {
	pb, owner, err := a.ownerOf(r.Context(), name)
	if err != nil {
		return nil, err
	}
	if owner.ID != a.b.ID() {
		return nil, a.redirect(w, r, owner)
	}
	return pb.topic(r.Context(), name, false, false)
}

// eachPartition runs op on every partition this broker owns, and sends the
// request (with body) to the owners of the others; then answers 204.
func (a *pulsarAdmin) eachPartition(w http.ResponseWriter, r *http.Request, tp topicParts, body []byte, op func(context.Context, *pulsarTopic) error) error {
	ctx := r.Context()
	for i := range tp.partitions {
		part := tp.partition(i)
		pb, owner, err := a.ownerOf(ctx, part)
		if err != nil {
			return err
		}
		if owner.ID != a.b.ID() {
			if _, err := a.forward(ctx, r.Method, owner, tp.partitionPath(r, i), body); err != nil {
				return err
			}
			continue
		}
		t, err := pb.topic(ctx, part, false, false)
		if err != nil {
			return err
		}
		if err := op(ctx, t); err != nil {
			return fmt.Errorf("%s: %w", part, err)
		}
	}
	return noContent(w)
}

// subscriptionOp runs op on the topic, or on every partition of a
// partitioned topic, and answers 204.
func (a *pulsarAdmin) subscriptionOp(w http.ResponseWriter, r *http.Request, op func(context.Context, *pulsarTopic) error) error {
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if tp.partitions > 0 {
		return a.eachPartition(w, r, tp, body, op)
	}
	t, err := a.servedTopic(w, r, tp.name)
	if t == nil || err != nil {
		return err
	}
	if err := op(r.Context(), t); err != nil {
		return err
	}
	return noContent(w)
}

// --- topics ---

// pulsarTopics lists a namespace's Pulsar topics: every non-partitioned
// topic and partition with storage, and every partition of its
// partitioned topics, sorted; and the partitioned topics' counts.
func (a *pulsarAdmin) pulsarTopics(ctx context.Context, ns string) ([]string, map[string]int32, error) {
	return pulsarTopicsOf(ctx, a.b, ns)
}

// TopicsOfNamespace implements pulsar.Backend.
func (pb *pulsarBackend) TopicsOfNamespace(ctx context.Context, ns string) ([]string, error) {
	topics, _, err := pulsarTopicsOf(ctx, pb.b, ns)
	if errors.Is(err, catalog.ErrNamespaceNotFound) {
		// Pulsar answers the binary protocol's listing of a namespace that
		// does not exist with no topics (its HTTP listing says 404); an
		// error here makes pattern consumers retry until they time out.
		return nil, nil
	}
	return topics, err
}

// pulsarTopicsOf lists a namespace's Pulsar topics: the non-partitioned
// ones (a managed ledger named after them) and every partition of the
// partitioned ones; and the partitioned ones' partition counts.
func pulsarTopicsOf(ctx context.Context, b *Broker, ns string) ([]string, map[string]int32, error) {
	a := struct{ b *Broker }{b}
	if _, err := a.b.admin.GetPolicies(ctx, ns); err != nil {
		return nil, nil, err
	}
	prefix := mlog.Key("persistent://" + ns + "/")
	kvs, _, err := meta.ListAll(ctx, a.b.cfg.Store, prefix)
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	for _, kv := range kvs {
		local, ok := strings.CutSuffix(strings.TrimPrefix(kv.Key, prefix), pulsarStorageSuffix)
		if ok && !strings.Contains(local, "/") {
			seen["persistent://"+ns+"/"+local] = true
		}
	}
	recs, err := a.b.admin.ListTopics(ctx, ns)
	if err != nil {
		return nil, nil, err
	}
	partitioned := map[string]int32{}
	for _, rec := range recs {
		if !isPulsarTopic(rec) {
			continue
		}
		name := "persistent://" + ns + "/" + rec.Name
		partitioned[name] = rec.Partitions
		for i := range rec.Partitions {
			seen[fmt.Sprintf("%s-partition-%d", name, i)] = true
		}
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	slices.Sort(out)
	return out, partitioned, nil
}

func (a *pulsarAdmin) listTopics(w http.ResponseWriter, r *http.Request) error {
	topics, _, err := a.pulsarTopics(r.Context(), namespaceOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, topics)
	return nil
}

func (a *pulsarAdmin) listPartitioned(w http.ResponseWriter, r *http.Request) error {
	_, partitioned, err := a.pulsarTopics(r.Context(), namespaceOf(r))
	if err != nil {
		return err
	}
	out := make([]string, 0, len(partitioned))
	for name := range partitioned {
		out = append(out, name)
	}
	slices.Sort(out)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// storageExists reports whether a topic's managed ledger exists.
func (a *pulsarAdmin) storageExists(ctx context.Context, name string) (bool, error) {
	_, err := a.b.cfg.Store.Get(ctx, mlog.Key(pulsarStorageName(name)))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, meta.ErrNotFound):
		return false, nil
	}
	return false, err
}

// createTopic creates a non-partitioned topic (409 when the name is taken).
func (a *pulsarAdmin) createTopic(w http.ResponseWriter, r *http.Request) error {
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	if tp.partitions > 0 {
		return restErrorf(http.StatusConflict, "%s already exists as a partitioned topic", tp.name)
	}
	if _, err := a.b.admin.GetPolicies(r.Context(), tp.ns); err != nil {
		return err
	}
	if ok, err := a.storageExists(r.Context(), tp.name); err != nil || ok {
		if ok {
			return restErrorf(http.StatusConflict, "this topic already exists: %s", tp.name)
		}
		return err
	}
	pb, owner, err := a.ownerOf(r.Context(), tp.name)
	if err != nil {
		return err
	}
	if owner.ID != a.b.ID() {
		return a.redirect(w, r, owner)
	}
	if _, err := pb.topic(r.Context(), tp.name, true, true); err != nil {
		return err
	}
	return noContent(w)
}

// deleteTopic deletes a non-partitioned topic (or a partition): refused
// with active producers or subscriptions unless ?force=true.
func (a *pulsarAdmin) deleteTopic(w http.ResponseWriter, r *http.Request) error {
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	if tp.partitions > 0 {
		return restErrorf(http.StatusConflict, "%s is a partitioned topic: DELETE its /partitions", tp.name)
	}
	if ok, err := a.storageExists(r.Context(), tp.name); err != nil || !ok {
		if err == nil {
			err = restErrorf(http.StatusNotFound, "topic %s not found", tp.name)
		}
		return err
	}
	pb, owner, err := a.ownerOf(r.Context(), tp.name)
	if err != nil {
		return err
	}
	if owner.ID != a.b.ID() {
		return a.redirect(w, r, owner)
	}
	if err := a.deleteLocal(r.Context(), pb, tp.name, r.URL.Query().Get("force") == "true"); err != nil {
		return err
	}
	return noContent(w)
}

// deleteLocal closes a topic this broker owns and deletes its storage.
func (a *pulsarAdmin) deleteLocal(ctx context.Context, pb *pulsarBackend, name string, force bool) error {
	if fe, ok := pb.server.TopicStats(name); ok && !force && clientsOf(fe) > 0 {
		return restErrorf(http.StatusPreconditionFailed, "topic %s has %d producers and consumers connected", name, clientsOf(fe))
	}
	pb.mu.Lock()
	t := pb.topics[name]
	pb.mu.Unlock()
	if t != nil {
		pb.drop(t) // its clients are closed and look it up again
	}
	if err := mlogclient.Delete(ctx, a.b.cfg.Store, a.b.cfg.Ledgers, pulsarStorageName(name)); err != nil {
		return err
	}
	return deleteTermination(ctx, a.b.cfg.Store, name)
}

// partitionCount reads the body of a partitions request: a bare integer
// (pulsar-admin, the Java admin client) or {"partitions": n, "properties":
// {...}} (the Go admin client); the properties are not kept.
func partitionCount(w http.ResponseWriter, r *http.Request) (int, error) {
	var body json.RawMessage
	if err := decodeBody(w, r, &body, true); err != nil {
		return 0, err
	}
	var n int
	if err := json.Unmarshal(body, &n); err != nil {
		var md struct {
			Partitions *int `json:"partitions"`
		}
		if err := json.Unmarshal(body, &md); err != nil || md.Partitions == nil {
			return 0, restErrorf(http.StatusBadRequest, "bad JSON body: want a partition count or {\"partitions\": n}")
		}
		n = *md.Partitions
	}
	if n < 1 || n > MaxPartitionsPerTopic {
		return 0, restErrorf(http.StatusPreconditionFailed, "%d partitions: want 1..%d", n, MaxPartitionsPerTopic)
	}
	return n, nil
}

func (a *pulsarAdmin) createPartitioned(w http.ResponseWriter, r *http.Request) error {
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	n, err := partitionCount(w, r)
	if err != nil {
		return err
	}
	if tp.partitions > 0 {
		return restErrorf(http.StatusConflict, "partitioned topic %s already exists", tp.name)
	}
	if ok, err := a.storageExists(r.Context(), tp.name); err != nil || ok {
		if ok {
			return restErrorf(http.StatusConflict, "%s already exists as a non-partitioned topic", tp.name)
		}
		return err
	}
	if _, err := a.b.admin.CreateTopic(r.Context(), tp.ns, tp.local, int32(n), map[string]string{pulsarProtocolConfig: "pulsar"}); err != nil {
		return err
	}
	return noContent(w)
}

func (a *pulsarAdmin) getPartitions(w http.ResponseWriter, r *http.Request) error {
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int{"partitions": tp.partitions})
	return nil
}

func (a *pulsarAdmin) updatePartitions(w http.ResponseWriter, r *http.Request) error {
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	n, err := partitionCount(w, r)
	if err != nil {
		return err
	}
	if tp.partitions == 0 {
		return restErrorf(http.StatusNotFound, "partitioned topic %s not found", tp.name)
	}
	if _, err := a.b.admin.SetPartitions(r.Context(), tp.ns, tp.local, int32(n)); err != nil {
		return err
	}
	return noContent(w)
}

// deletePartitioned removes a partitioned topic's record, then each
// partition's storage, here or through its owner.
func (a *pulsarAdmin) deletePartitioned(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	if tp.partitions == 0 {
		return restErrorf(http.StatusNotFound, "partitioned topic %s not found", tp.name)
	}
	pb, err := a.backend()
	if err != nil {
		return err
	}
	force := r.URL.Query().Get("force") == "true"
	for i := range tp.partitions {
		if fe, ok := pb.server.TopicStats(tp.partition(i)); ok && !force && clientsOf(fe) > 0 {
			return restErrorf(http.StatusPreconditionFailed, "partition %s has producers or consumers connected", tp.partition(i))
		}
	}
	if err := a.b.admin.DeleteTopic(ctx, tp.ns, tp.local); err != nil {
		return err
	}
	for i := range tp.partitions {
		part := tp.partition(i)
		if ok, err := a.storageExists(ctx, part); err != nil || !ok {
			if err != nil {
				return err
			}
			continue // never used
		}
		_, owner, err := a.ownerOf(ctx, part)
		if err != nil {
			return err
		}
		if owner.ID == a.b.ID() {
			err = a.deleteLocal(ctx, pb, part, true)
		} else {
			_, local, _ := parsePulsarTopic(part)
			_, err = a.forward(ctx, http.MethodDelete, owner, "/admin/v2/persistent/"+tp.ns+"/"+local+"?force=true", nil)
		}
		if err != nil {
			return fmt.Errorf("delete partition %s: %w", part, err)
		}
	}
	return noContent(w)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// clientsOf counts a topic's producers and consumers.
func clientsOf(fe pulsar.TopicStats) int {
	n := len(fe.Producers)
	for _, s := range fe.Subscriptions {
		n += len(s.Consumers)
	}
	return n
}

// lookup answers Pulsar's HTTP lookup (what a client given an http:// service
// URL asks before it connects): the owner broker's binary-protocol and HTTP
// URLs, the owner assigned now when the bundle has none.
func (a *pulsarAdmin) lookup(w http.ResponseWriter, r *http.Request) error {
	tp, err := a.topicOf(r)
	if err != nil {
		return err
	}
	pb, owner, err := a.ownerOf(r.Context(), tp.name)
	if err != nil {
		return err
	}
	brokerURL, brokerTLSURL := pb.url, pb.tlsURL
	if owner.ID != a.b.ID() {
		res, err := pb.Lookup(r.Context(), tp.name)
		if err != nil {
			return err
		}
		brokerURL, brokerTLSURL = res.OwnerURL, res.OwnerTLSURL
	}
	httpURL := "http://" + owner.HTTPAddr
	writeJSON(w, http.StatusOK, map[string]string{"brokerUrl": brokerURL, "nativeUrl": brokerURL, "httpUrl": httpURL,
		"brokerUrlTls": brokerTLSURL, "httpUrlTls": ""})
	return nil
}

// unloadTopic closes a topic (each partition of a partitioned one) where
// it is served; its producers and consumers are told (CLOSE_PRODUCER,
// CLOSE_CONSUMER), look it up again and reconnect, and the owner loads it
// afresh, as after a bundle unload.
func (a *pulsarAdmin) unloadTopic(w http.ResponseWriter, r *http.Request) error {
	return a.subscriptionOp(w, r, func(_ context.Context, t *pulsarTopic) error {
		t.pb.drop(t)
		return nil
	})
}
