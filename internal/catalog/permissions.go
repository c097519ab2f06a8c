package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"quire/internal/meta"
)

// AuthAction is an action a namespace permission grants (Pulsar's
// AuthAction).
type AuthAction string

const (
	// ActionProduce: create producers.
	ActionProduce AuthAction = "produce"
	// ActionConsume: subscribe, and manage subscriptions.
	ActionConsume AuthAction = "consume"
	// ActionFunctions, ActionSources, ActionSinks, ActionPackages: Pulsar
	// Functions and IO, accepted and stored; Quire runs none.
	ActionFunctions AuthAction = "functions"
	ActionSources   AuthAction = "sources"
	ActionSinks     AuthAction = "sinks"
	ActionPackages  AuthAction = "packages"
)

// MaxRoleBytes bounds a role's name in a permission.
const MaxRoleBytes = 256

func validAction(a AuthAction) bool {
	switch a {
	case ActionProduce, ActionConsume, ActionFunctions, ActionSources, ActionSinks, ActionPackages:
		return true
	}
	return false
}

func validatePermissions(perms map[string][]AuthAction) error {
	for role, actions := range perms {
		if role == "" || len(role) > MaxRoleBytes {
			return fmt.Errorf("role %q: empty or longer than %d bytes", role, MaxRoleBytes)
		}
		for _, a := range actions {
			if !validAction(a) {
				return fmt.Errorf("role %q: unknown action %q (produce, consume, functions, sources, sinks, packages)", role, a)
			}
		}
	}
	return nil
}

// Allows reports whether the namespace permissions grant role action.
func (p Policies) Allows(role string, action AuthAction) bool {
	return slices.Contains(p.Permissions[role], action)
}

// GrantPermission sets role's actions in namespace ns (replacing what it
// had, as Pulsar's grant-permission does). Fails with ErrInvalidPolicies
// for an unknown action, ErrNamespaceNotFound.
func (a *Catalog) GrantPermission(ctx context.Context, ns, role string, actions []AuthAction) error {
	actions = slices.Clone(actions)
	slices.Sort(actions)
	actions = slices.Compact(actions)
	_, err := a.UpdatePolicies(ctx, ns, func(p *Policies) error {
		p.Permissions = maps.Clone(p.Permissions)
		if p.Permissions == nil {
			p.Permissions = map[string][]AuthAction{}
		}
		p.Permissions[role] = actions
		return nil
	})
	return err
}

// RevokePermission removes role's permissions in namespace ns (nothing to
// remove is not an error).
func (a *Catalog) RevokePermission(ctx context.Context, ns, role string) error {
	_, err := a.UpdatePolicies(ctx, ns, func(p *Policies) error {
		p.Permissions = maps.Clone(p.Permissions)
		delete(p.Permissions, role)
		return nil
	})
	return err
}

// UpdateTenant applies change to a tenant's record and writes it back with
// compare-and-swap, retrying on concurrent updates (change may run more than
// once). Fails with ErrTenantNotFound.
func (a *Catalog) UpdateTenant(ctx context.Context, tenant string, change func(*TenantInfo) error) (TenantInfo, error) {
	if err := ValidateTenant(tenant); err != nil {
		return TenantInfo{}, fmt.Errorf("update tenant: %w", err)
	}
	for {
		var info TenantInfo
		version, err := meta.GetJSON(ctx, a.store, tenantKey(tenant), &info)
		if err != nil {
			if errors.Is(err, meta.ErrNotFound) {
				return TenantInfo{}, fmt.Errorf("update tenant %s: %w", tenant, ErrTenantNotFound)
			}
			return TenantInfo{}, fmt.Errorf("update tenant %s: %w", tenant, err)
		}
		if err := change(&info); err != nil {
			return TenantInfo{}, fmt.Errorf("update tenant %s: %w", tenant, err)
		}
		value, err := json.Marshal(info)
		if err != nil {
			return TenantInfo{}, fmt.Errorf("update tenant %s: %w", tenant, err)
		}
		_, err = a.store.Put(ctx, tenantKey(tenant), value, version)
		switch {
		case err == nil:
			return info, nil
		case errors.Is(err, meta.ErrBadVersion):
			continue // lost a race: re-read and re-apply
		case errors.Is(err, meta.ErrNotFound):
			return TenantInfo{}, fmt.Errorf("update tenant %s: %w", tenant, ErrTenantNotFound)
		default:
			return TenantInfo{}, fmt.Errorf("update tenant %s: %w", tenant, err)
		}
	}
}
