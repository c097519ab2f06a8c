package broker

// The admin API's namespace endpoints: namespaces, their policies in
// Pulsar's JSON, bundles and unload (see pulsar_admin.go).

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"quire/internal/catalog"
	"quire/internal/ownership"
)

// --- namespaces ---

func namespaceOf(r *http.Request) string { return r.PathValue("tenant") + "/" + r.PathValue("ns") }

func (a *pulsarAdmin) listNamespaces(w http.ResponseWriter, r *http.Request) error {
	tenant := r.PathValue("tenant")
	if _, err := a.b.admin.GetTenant(r.Context(), tenant); err != nil {
		return err
	}
	nss, err := a.b.admin.ListNamespaces(r.Context(), tenant)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(nss))
	return nil
}

// namespaceBody is the part of Pulsar's Policies a namespace's creation
// takes (the bundle count); the rest starts from the defaults.
type namespaceBody struct {
	Bundles *struct {
		NumBundles int `json:"numBundles"`
	} `json:"bundles"`
}

func (a *pulsarAdmin) createNamespace(w http.ResponseWriter, r *http.Request) error {
	var body namespaceBody
	if err := decodeBody(w, r, &body, false); err != nil {
		return err
	}
	var pol *catalog.Policies
	if body.Bundles != nil && body.Bundles.NumBundles > 0 {
		p := catalog.DefaultPolicies()
		p.Bundles = catalog.BundlesPolicy{NumBundles: body.Bundles.NumBundles}
		pol = &p
	}
	if err := a.b.admin.CreateNamespace(r.Context(), namespaceOf(r), pol); err != nil {
		return err
	}
	return noContent(w)
}

func (a *pulsarAdmin) deleteNamespace(w http.ResponseWriter, r *http.Request) error {
	ns := namespaceOf(r)
	topics, _, err := a.pulsarTopics(r.Context(), ns)
	if err != nil {
		return err
	}
	if len(topics) > 0 {
		return restErrorf(http.StatusConflict, "namespace %s has %d topics (%s, ...): delete them first", ns, len(topics), topics[0])
	}
	if err := a.b.admin.DeleteNamespace(r.Context(), ns); err != nil {
		return err
	}
	return noContent(w)
}

type persistenceJSON struct {
	BookkeeperEnsemble             int     `json:"bookkeeperEnsemble"`
	BookkeeperWriteQuorum          int     `json:"bookkeeperWriteQuorum"`
	BookkeeperAckQuorum            int     `json:"bookkeeperAckQuorum"`
	ManagedLedgerMaxMarkDeleteRate float64 `json:"managedLedgerMaxMarkDeleteRate"`
}

type retentionJSON struct {
	RetentionTimeInMinutes int64 `json:"retentionTimeInMinutes"`
	RetentionSizeInMB      int64 `json:"retentionSizeInMB"`
}

type backlogQuotaJSON struct {
	Limit     *lenientInt64 `json:"limit,omitempty"` // Pulsar's older name of limitSize
	LimitSize lenientInt64  `json:"limitSize"`
	LimitTime lenientInt64  `json:"limitTime"`
	Policy    string        `json:"policy"`
}

// lenientInt64 reads a JSON number or a string holding one, as Pulsar's
// JSON mapper does ({"limit": "10240"} is what pulsar-client-go's tests
// send).
type lenientInt64 int64

func (n *lenientInt64) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("not an integer: %s", b)
	}
	*n = lenientInt64(v)
	return nil
}

type bundlesJSON struct {
	Boundaries []string `json:"boundaries"`
	NumBundles int      `json:"numBundles"`
}

// policiesJSON is the part of Pulsar's Policies that Quire keeps.
type policiesJSON struct {
	Persistence          persistenceJSON             `json:"persistence"`
	RetentionPolicies    retentionJSON               `json:"retention_policies"`
	BacklogQuotaMap      map[string]backlogQuotaJSON `json:"backlog_quota_map"`
	MessageTTLInSeconds  int64                       `json:"message_ttl_in_seconds"`
	DeduplicationEnabled bool                        `json:"deduplicationEnabled"`
	Bundles              bundlesJSON                 `json:"bundles"`
	AuthPolicies         authPoliciesJSON            `json:"auth_policies"`
}

// authPoliciesJSON is Pulsar's AuthPolicies: the namespace's grants (topic
// and subscription grants are not kept: always empty).
type authPoliciesJSON struct {
	NamespaceAuth         map[string][]catalog.AuthAction            `json:"namespace_auth"`
	DestinationAuth       map[string]map[string][]catalog.AuthAction `json:"destination_auth"`
	SubscriptionAuthRoles map[string][]string                        `json:"subscription_auth_roles"`
}

func toPersistenceJSON(p catalog.Persistence) persistenceJSON {
	return persistenceJSON{BookkeeperEnsemble: p.Ensemble, BookkeeperWriteQuorum: p.WriteQuorum, BookkeeperAckQuorum: p.AckQuorum}
}

// backlogQuotaMap is Pulsar's map by quota type; a type without a limit is
// left out.
func backlogQuotaMap(q catalog.BacklogQuota) map[string]backlogQuotaJSON {
	m := map[string]backlogQuotaJSON{}
	if q.LimitBytes >= 0 {
		m["destination_storage"] = backlogQuotaJSON{LimitSize: lenientInt64(q.LimitBytes), LimitTime: -1, Policy: string(q.Policy)}
	}
	if q.LimitTimeSeconds >= 0 {
		m["message_age"] = backlogQuotaJSON{LimitSize: -1, LimitTime: lenientInt64(q.LimitTimeSeconds), Policy: string(q.Policy)}
	}
	return m
}

func toBundlesJSON(b catalog.BundlesPolicy) bundlesJSON {
	out := bundlesJSON{NumBundles: b.NumBundles}
	for _, x := range b.Boundaries {
		out.Boundaries = append(out.Boundaries, fmt.Sprintf("0x%08x", x))
	}
	return out
}

func (a *pulsarAdmin) getPolicies(w http.ResponseWriter, r *http.Request) error {
	p, err := a.b.admin.GetPolicies(r.Context(), namespaceOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, policiesJSON{
		Persistence:          toPersistenceJSON(p.Persistence),
		RetentionPolicies:    retentionJSON{RetentionTimeInMinutes: p.Retention.TimeMinutes, RetentionSizeInMB: p.Retention.SizeMB},
		BacklogQuotaMap:      backlogQuotaMap(p.BacklogQuota),
		MessageTTLInSeconds:  p.MessageTTLSeconds,
		DeduplicationEnabled: p.Deduplication,
		Bundles:              toBundlesJSON(p.Bundles),
		AuthPolicies: authPoliciesJSON{NamespaceAuth: nonNilMap(p.Permissions),
			DestinationAuth: map[string]map[string][]catalog.AuthAction{}, SubscriptionAuthRoles: map[string][]string{}},
	})
	return nil
}

// policy answers GET of one policy: what pick returns.
func (a *pulsarAdmin) policy(w http.ResponseWriter, r *http.Request, pick func(catalog.Policies) any) error {
	p, err := a.b.admin.GetPolicies(r.Context(), namespaceOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pick(p))
	return nil
}

// update applies change to the namespace's policies (a CAS loop).
func (a *pulsarAdmin) update(w http.ResponseWriter, r *http.Request, change func(*catalog.Policies) error) error {
	if _, err := a.b.admin.UpdatePolicies(r.Context(), namespaceOf(r), change); err != nil {
		return err
	}
	return noContent(w)
}

func (a *pulsarAdmin) getPersistence(w http.ResponseWriter, r *http.Request) error {
	return a.policy(w, r, func(p catalog.Policies) any { return toPersistenceJSON(p.Persistence) })
}

func (a *pulsarAdmin) setPersistence(w http.ResponseWriter, r *http.Request) error {
	var body persistenceJSON
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	return a.update(w, r, func(p *catalog.Policies) error {
		p.Persistence = catalog.Persistence{Ensemble: body.BookkeeperEnsemble, WriteQuorum: body.BookkeeperWriteQuorum, AckQuorum: body.BookkeeperAckQuorum}
		return nil
	})
}

func (a *pulsarAdmin) getRetention(w http.ResponseWriter, r *http.Request) error {
	return a.policy(w, r, func(p catalog.Policies) any {
		return retentionJSON{RetentionTimeInMinutes: p.Retention.TimeMinutes, RetentionSizeInMB: p.Retention.SizeMB}
	})
}

func (a *pulsarAdmin) setRetention(w http.ResponseWriter, r *http.Request) error {
	var body retentionJSON
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	return a.update(w, r, func(p *catalog.Policies) error {
		p.Retention = catalog.Retention{TimeMinutes: body.RetentionTimeInMinutes, SizeMB: body.RetentionSizeInMB}
		return nil
	})
}

func (a *pulsarAdmin) getBacklogQuota(w http.ResponseWriter, r *http.Request) error {
	return a.policy(w, r, func(p catalog.Policies) any { return backlogQuotaMap(p.BacklogQuota) })
}

// backlogQuotaType is the request's ?backlogQuotaType (destination_storage
// by default, as in Pulsar).
func backlogQuotaType(r *http.Request) (string, error) {
	switch t := r.URL.Query().Get("backlogQuotaType"); t {
	case "", "destination_storage":
		return "destination_storage", nil
	case "message_age":
		return t, nil
	default:
		return "", restErrorf(http.StatusPreconditionFailed, "backlogQuotaType %q: want destination_storage or message_age", t)
	}
}

func (a *pulsarAdmin) setBacklogQuota(w http.ResponseWriter, r *http.Request) error {
	kind, err := backlogQuotaType(r)
	if err != nil {
		return err
	}
	var body backlogQuotaJSON
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	return a.update(w, r, func(p *catalog.Policies) error {
		if body.Policy != "" {
			p.BacklogQuota.Policy = catalog.BacklogQuotaPolicy(body.Policy)
		}
		if kind == "message_age" {
			p.BacklogQuota.LimitTimeSeconds = int64(body.LimitTime)
			return nil
		}
		p.BacklogQuota.LimitBytes = int64(body.LimitSize)
		if body.Limit != nil && body.LimitSize == 0 {
			p.BacklogQuota.LimitBytes = int64(*body.Limit)
		}
		return nil
	})
}

func (a *pulsarAdmin) removeBacklogQuota(w http.ResponseWriter, r *http.Request) error {
	kind, err := backlogQuotaType(r)
	if err != nil {
		return err
	}
	return a.update(w, r, func(p *catalog.Policies) error {
		if kind == "message_age" {
			p.BacklogQuota.LimitTimeSeconds = -1
		} else {
			p.BacklogQuota.LimitBytes = -1
		}
		return nil
	})
}

func (a *pulsarAdmin) getMessageTTL(w http.ResponseWriter, r *http.Request) error {
	return a.policy(w, r, func(p catalog.Policies) any { return p.MessageTTLSeconds })
}

func (a *pulsarAdmin) setMessageTTL(w http.ResponseWriter, r *http.Request) error {
	var ttl int64
	if err := decodeBody(w, r, &ttl, true); err != nil {
		return err
	}
	return a.update(w, r, func(p *catalog.Policies) error {
		p.MessageTTLSeconds = ttl
		return nil
	})
}

func (a *pulsarAdmin) removeMessageTTL(w http.ResponseWriter, r *http.Request) error {
	return a.update(w, r, func(p *catalog.Policies) error {
		p.MessageTTLSeconds = 0
		return nil
	})
}

func (a *pulsarAdmin) getDeduplication(w http.ResponseWriter, r *http.Request) error {
	return a.policy(w, r, func(p catalog.Policies) any { return p.Deduplication })
}

func (a *pulsarAdmin) setDeduplication(w http.ResponseWriter, r *http.Request) error {
	var on bool
	if err := decodeBody(w, r, &on, true); err != nil {
		return err
	}
	return a.update(w, r, func(p *catalog.Policies) error {
		p.Deduplication = on
		return nil
	})
}

func (a *pulsarAdmin) removeDeduplication(w http.ResponseWriter, r *http.Request) error {
	return a.update(w, r, func(p *catalog.Policies) error {
		p.Deduplication = false
		return nil
	})
}

func (a *pulsarAdmin) getBundles(w http.ResponseWriter, r *http.Request) error {
	return a.policy(w, r, func(p catalog.Policies) any { return toBundlesJSON(p.Bundles) })
}

// unloadBundle releases a bundle this broker owns (its topics' clients
// reconnect wherever it is placed next); the owner's address answers when
// another broker owns it.
func (a *pulsarAdmin) unloadBundle(w http.ResponseWriter, r *http.Request) error {
	ns := namespaceOf(r)
	p, err := a.b.admin.GetPolicies(r.Context(), ns)
	if err != nil {
		return err
	}
	bundle, err := catalog.ParseBundle(ns, r.PathValue("bundle"))
	if err != nil {
		return err
	}
	if !slices.Contains(catalog.BundlesOf(ns, p.Bundles.Boundaries), bundle) {
		return restErrorf(http.StatusNotFound, "bundle %s is not a bundle of %s", bundle.Range(), ns)
	}
	own, ok := a.b.cluster.BundleOwner(bundle)
	switch {
	case !ok:
		return noContent(w) // not loaded anywhere: nothing to unload
	case own.Owner.ID != a.b.ID():
		return a.redirect(w, r, own.Owner)
	}
	if err := a.b.cluster.Unload(r.Context(), bundle); err != nil && !errors.Is(err, ownership.ErrNotOwner) {
		return err
	}
	return noContent(w)
}

// unloadNamespace unloads every bundle of the namespace, here or through
// its owner.
func (a *pulsarAdmin) unloadNamespace(w http.ResponseWriter, r *http.Request) error {
	ns := namespaceOf(r)
	p, err := a.b.admin.GetPolicies(r.Context(), ns)
	if err != nil {
		return err
	}
	for _, bundle := range catalog.BundlesOf(ns, p.Bundles.Boundaries) {
		own, ok := a.b.cluster.BundleOwner(bundle)
		switch {
		case !ok:
		case own.Owner.ID == a.b.ID():
			if err := a.b.cluster.Unload(r.Context(), bundle); err != nil && !errors.Is(err, ownership.ErrNotOwner) {
				return err
			}
		default:
			path := "/admin/v2/namespaces/" + ns + "/" + bundle.Range() + "/unload"
			if _, err := a.forward(r.Context(), http.MethodPut, own.Owner, path, nil); err != nil {
				return fmt.Errorf("unload %s through broker %d: %w", bundle, own.Owner.ID, err)
			}
		}
	}
	return noContent(w)
}
