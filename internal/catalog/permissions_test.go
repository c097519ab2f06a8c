package catalog

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

func TestPermissions(t *testing.T) {
	ctx := context.Background()
	_, a := newMemAdmin(t)
	if err := a.GrantPermission(ctx, "acme/app", "r", []AuthAction{ActionConsume}); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("grant in a missing namespace: %v", err)
	}
	if err := a.CreateTenant(ctx, "acme", TenantInfo{}); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateNamespace(ctx, "acme/app", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.GrantPermission(ctx, "acme/app", "w", []AuthAction{ActionProduce, ActionFunctions, ActionProduce}); err != nil {
		t.Fatal(err)
	}
	if err := a.GrantPermission(ctx, "acme/app", "r", []AuthAction{ActionConsume}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]AuthAction{{"fly"}, {ActionConsume, ""}} {
		if err := a.GrantPermission(ctx, "acme/app", "x", bad); !errors.Is(err, ErrInvalidPolicies) {
			t.Fatalf("grant %v: %v, want ErrInvalidPolicies", bad, err)
		}
	}
	if err := a.GrantPermission(ctx, "acme/app", "", []AuthAction{ActionConsume}); !errors.Is(err, ErrInvalidPolicies) {
		t.Fatalf("grant to an empty role: %v", err)
	}
	p, err := a.GetPolicies(ctx, "acme/app")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Permissions["w"], []AuthAction{ActionFunctions, ActionProduce}) || !p.Allows("r", ActionConsume) ||
		p.Allows("r", ActionProduce) || p.Allows("w", ActionConsume) || p.Allows("nobody", ActionConsume) {
		t.Fatalf("permissions %v", p.Permissions)
	}
	// A grant replaces the role's actions; a revocation removes them.
	if err := a.GrantPermission(ctx, "acme/app", "w", []AuthAction{ActionConsume}); err != nil {
		t.Fatal(err)
	}
	if err := a.RevokePermission(ctx, "acme/app", "r"); err != nil {
		t.Fatal(err)
	}
	if err := a.RevokePermission(ctx, "acme/app", "never-granted"); err != nil {
		t.Fatal(err)
	}
	if p, _ = a.GetPolicies(ctx, "acme/app"); len(p.Permissions) != 1 || p.Allows("w", ActionProduce) || !p.Allows("w", ActionConsume) {
		t.Fatalf("after grant and revoke: %v", p.Permissions)
	}
}

func TestUpdateTenant(t *testing.T) {
	ctx := context.Background()
	_, a := newMemAdmin(t)
	add := func(role string) func(*TenantInfo) error {
		return func(info *TenantInfo) error {
			info.AdminRoles = append(info.AdminRoles, role)
			return nil
		}
	}
	if _, err := a.UpdateTenant(ctx, "acme", add("x")); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("update a missing tenant: %v", err)
	}
	if err := a.CreateTenant(ctx, "acme", TenantInfo{}); err != nil {
		t.Fatal(err)
	}
	// Concurrent updates all land (CAS retries).
	var wg sync.WaitGroup
	roles := []string{"a", "b", "c", "d"}
	for _, r := range roles {
		wg.Go(func() {
			if _, err := a.UpdateTenant(ctx, "acme", add(r)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	info, err := a.GetTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(info.AdminRoles)
	if !slices.Equal(info.AdminRoles, roles) || info.Created.IsZero() {
		t.Fatalf("tenant after updates: %+v", info)
	}
}
