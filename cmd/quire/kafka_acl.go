package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"quire/internal/auth"
	"quire/internal/kafka"
	"quire/internal/meta"
)

// aclFlags turn on Kafka ACLs on the Kafka listener (`quire broker`,
// `quire standalone`): Kafka's authorizer.class.name (StandardAuthorizer),
// super.users and allow.everyone.if.no.acl.found.
type aclFlags struct {
	enabled           bool
	superUsers        string
	allowIfNoACLFound bool
}

func (a *aclFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&a.enabled, "kafka-authorizer", false, "enforce Kafka ACLs on every Kafka request (Kafka's StandardAuthorizer); ACLs are kept in the metadata store and managed with CreateAcls/DescribeAcls/DeleteAcls (kafka-acls)")
	f.StringVar(&a.superUsers, "kafka-super-users", "", "principals allowed everything, ';'-separated (Kafka's super.users, e.g. User:alice;User:bob); --kafka-sasl-admin-user is always one")
	f.BoolVar(&a.allowIfNoACLFound, "kafka-allow-everyone-if-no-acl-found", false, "with --kafka-authorizer, allow every request on a resource that has no ACL at all (Kafka's allow.everyone.if.no.acl.found)")
}

// parseSuperUsers reads Kafka's super.users form.
func parseSuperUsers(s string) ([]auth.Principal, error) {
	var out []auth.Principal
	for _, field := range strings.Split(s, ";") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		p, err := auth.ParsePrincipal(field)
		if err != nil {
			return nil, fmt.Errorf("--kafka-super-users: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// authorizer opens the ACL store and returns the listener's authorizer
// (nil without --kafka-authorizer); the store is followed until ctx ends.
// admins (the SASL admin user) are super users too.
func (a *aclFlags) authorizer(ctx context.Context, store meta.Store, log *slog.Logger, admins []auth.Principal) (*auth.Authorizer, error) {
	superUsers, err := parseSuperUsers(a.superUsers)
	if err != nil {
		return nil, err
	}
	if !a.enabled {
		if len(superUsers) > 0 || a.allowIfNoACLFound {
			return nil, fmt.Errorf("--kafka-super-users and --kafka-allow-everyone-if-no-acl-found need --kafka-authorizer")
		}
		return nil, nil
	}
	for _, p := range admins {
		if !slices.Contains(superUsers, p) {
			superUsers = append(superUsers, p)
		}
	}
	acls, err := auth.OpenACLStore(ctx, store, log)
	if err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		acls.Close()
	}()
	log.Info("Kafka ACLs enforced", "super_users", superUsers, "allow_everyone_if_no_acl_found", a.allowIfNoACLFound)
	return auth.NewAuthorizer(acls, auth.AuthorizerConfig{SuperUsers: superUsers, AllowEveryoneIfNoACLFound: a.allowIfNoACLFound}), nil
}

// security is the Kafka listener's Security: SASL and the user database
// (kafka_sasl.go), and the authorizer when ACLs are on.
func (s *saslFlags) security(ctx context.Context, store meta.Store, log *slog.Logger) (kafka.Security, error) {
	sec, err := s.saslSecurity(ctx, store, log)
	if err != nil {
		return kafka.Security{}, err
	}
	if sec.Authorizer, err = s.acl.authorizer(ctx, store, log, sec.SuperUsers); err != nil {
		return kafka.Security{}, err
	}
	return sec, nil
}
