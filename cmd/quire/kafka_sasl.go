package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"quire/internal/auth"
	"quire/internal/kafka"
	"quire/internal/meta"
)

// adminPasswordEnv holds the bootstrap admin's password, so that it never
// shows in ps as a flag value would.
const adminPasswordEnv = "QUIRE_KAFKA_SASL_ADMIN_PASSWORD"

// saslFlags configure SASL on the Kafka listener (`quire broker`, `quire
// standalone`).
type saslFlags struct {
	mechanisms        []string
	adminUser         string
	adminPasswordFile string
	reauth            time.Duration
	acl               aclFlags   // kafka_acl.go
	quota             quotaFlags // kafka_quota.go: per-IP connection bound
	// OAUTHBEARER (KIP-768's names): the JWKS file, the issuer and
	// audience expected, the claim the principal is taken from.
	oauthJWKS, oauthIssuer, oauthAudience, oauthSubClaim string
	// sslPrincipalRules: ssl.principal.mapping.rules.
	sslPrincipalRules string
}

func (s *saslFlags) register(f *pflag.FlagSet) {
	f.StringSliceVar(&s.mechanisms, "kafka-sasl-mechanisms", nil, "SASL mechanisms the Kafka listener requires, of "+strings.Join(append(slices.Clone(auth.Mechanisms), auth.MechanismOAuthBearer), ",")+" (empty: no SASL); with --kafka-tls-* it is Kafka's SASL_SSL, without SASL_PLAINTEXT")
	f.StringVar(&s.adminUser, "kafka-sasl-admin-user", "", "the SASL user who may add, change and delete users (kafka-configs --entity-type users); required with a PLAIN or SCRAM mechanism. Created at start, if it has no credentials yet, with the password in $"+adminPasswordEnv+" or --kafka-sasl-admin-password-file")
	f.StringVar(&s.oauthJWKS, "kafka-sasl-oauthbearer-jwks", "", "OAUTHBEARER: JWKS file (RFC 7517) of the keys tokens are signed with (sasl.oauthbearer.jwks.endpoint.url as a file); required with OAUTHBEARER")
	f.StringVar(&s.oauthIssuer, "kafka-sasl-oauthbearer-expected-issuer", "", "OAUTHBEARER: the iss a token must carry (empty: not checked)")
	f.StringVar(&s.oauthAudience, "kafka-sasl-oauthbearer-expected-audience", "", "OAUTHBEARER: an aud a token must carry (empty: not checked)")
	f.StringVar(&s.sslPrincipalRules, "kafka-tls-principal-mapping-rules", "DEFAULT", "how a client certificate's subject DN becomes the principal on a TLS listener without SASL (Kafka's ssl.principal.mapping.rules: DEFAULT, or RULE:pattern/replacement/[LU], comma-separated)")
	f.StringVar(&s.oauthSubClaim, "kafka-sasl-oauthbearer-sub-claim-name", "sub", "OAUTHBEARER: the claim the principal (User:<value>) is taken from")
	f.StringVar(&s.adminPasswordFile, "kafka-sasl-admin-password-file", "", "file holding the password --kafka-sasl-admin-user is created with (one line)")
	f.DurationVar(&s.reauth, "kafka-sasl-reauth", 0, "SASL session lifetime (connections.max.reauth.ms): clients re-authenticate within it (KIP-368) or are disconnected; 0: sessions last as long as the connection")
	s.acl.register(f)
	s.quota.register(f)
}

// saslSecurity is the Kafka listener's Security: SASL as the flags say, and
// the user database (on store) for the SCRAM credential APIs on every
// listener. It creates the admin user when asked to and it has no
// credentials.
func (s *saslFlags) saslSecurity(ctx context.Context, store meta.Store, log *slog.Logger) (kafka.Security, error) {
	creds := auth.NewCredentials(store)
	sec := kafka.Security{Mechanisms: s.mechanisms, Credentials: creds, SessionLifetime: s.reauth}
	mapping, err := auth.ParseSSLPrincipalMappingRules(s.sslPrincipalRules)
	if err != nil {
		return kafka.Security{}, fmt.Errorf("--kafka-tls-principal-mapping-rules: %w", err)
	}
	sec.SSLPrincipalMapping = mapping
	if slices.Contains(s.mechanisms, auth.MechanismOAuthBearer) {
		if s.oauthJWKS == "" {
			return kafka.Security{}, errors.New("OAUTHBEARER needs --kafka-sasl-oauthbearer-jwks")
		}
		cfg, err := auth.ReadBearerConfig(s.oauthJWKS)
		if err != nil {
			return kafka.Security{}, fmt.Errorf("--kafka-sasl-oauthbearer-jwks: %w", err)
		}
		cfg.Issuer, cfg.Audience, cfg.SubClaim = s.oauthIssuer, s.oauthAudience, s.oauthSubClaim
		if sec.Bearer, err = auth.NewBearerValidator(cfg); err != nil {
			return kafka.Security{}, fmt.Errorf("--kafka-sasl-oauthbearer-jwks %s: %w", s.oauthJWKS, err)
		}
	} else if s.oauthJWKS != "" {
		return kafka.Security{}, errors.New("--kafka-sasl-oauthbearer-jwks needs OAUTHBEARER in --kafka-sasl-mechanisms")
	}
	if err := sec.Validate(); err != nil {
		return kafka.Security{}, err
	}
	withCredentials := slices.ContainsFunc(s.mechanisms, func(m string) bool { return m != auth.MechanismOAuthBearer })
	if !withCredentials {
		if s.adminUser != "" {
			return kafka.Security{}, errors.New("--kafka-sasl-admin-user needs a PLAIN or SCRAM mechanism in --kafka-sasl-mechanisms")
		}
		return sec, nil
	}
	if s.adminUser == "" {
		return kafka.Security{}, errors.New("PLAIN and SCRAM in --kafka-sasl-mechanisms need --kafka-sasl-admin-user (the user who manages the others)")
	}
	sec.SuperUsers = []auth.Principal{auth.User(s.adminUser)}
	password, err := s.adminPassword()
	if err != nil {
		return kafka.Security{}, err
	}
	if password == "" {
		if _, err := creds.SCRAM(ctx, s.adminUser); err != nil {
			return kafka.Security{}, fmt.Errorf("admin user %q: %w (give its password in $%s or --kafka-sasl-admin-password-file to create it)", s.adminUser, err, adminPasswordEnv)
		}
		return sec, nil
	}
	added, err := creds.AddIfAbsent(ctx, s.adminUser, password)
	if err != nil {
		return kafka.Security{}, fmt.Errorf("create admin user %q: %w", s.adminUser, err)
	}
	if added {
		log.Info("created the SASL admin user", "user", s.adminUser, "mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512 (PLAIN checks against them)")
	}
	return sec, nil
}

// adminPassword reads the admin's password from the file flag or the
// environment ("" when neither gives one).
func (s *saslFlags) adminPassword() (string, error) {
	if s.adminPasswordFile != "" {
		data, err := os.ReadFile(s.adminPasswordFile)
		if err != nil {
			return "", fmt.Errorf("--kafka-sasl-admin-password-file: %w", err)
		}
		password := strings.TrimRight(string(data), "\r\n")
		if password == "" {
			return "", fmt.Errorf("--kafka-sasl-admin-password-file %s is empty", s.adminPasswordFile)
		}
		return password, nil
	}
	return os.Getenv(adminPasswordEnv), nil
}
