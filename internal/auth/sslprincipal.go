package auth

// The principal of a client authenticated by its TLS certificate, as
// Kafka derives it (ssl.principal.mapping.rules, KIP-371): the
// certificate subject's distinguished name in RFC 2253 form, mapped by the
// first rule that matches it:
//
//	DEFAULT                          the DN as it is
//	RULE:pattern/replacement/[LU]    if pattern (a regular expression)
//	                                 matches the whole DN, the replacement
//	                                 ($1, $2 for groups), lower- or
//	                                 upper-cased with L or U
//
// Rules are separated by commas or new lines (a comma inside a rule's
// pattern or replacement belongs to the rule). When no rule matches, the
// DN is refused, as in Kafka. Patterns are Go's RE2, which covers what
// Kafka's documentation shows; Java-only constructs fail to parse.

import (
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// SSLPrincipalMapper maps certificate subjects to principal names.
type SSLPrincipalMapper struct {
	rules []sslRule
}

type sslRule struct {
	isDefault   bool
	pattern     *regexp.Regexp
	replacement string
	toLower     bool
	toUpper     bool
}

// ruleStart finds where each rule begins.
var ruleStart = regexp.MustCompile(`(?:^|[,\n]\s*)(DEFAULT|RULE:)`)

// ParseSSLPrincipalMappingRules parses Kafka's ssl.principal.mapping.rules
// ("" is DEFAULT).
func ParseSSLPrincipalMappingRules(spec string) (*SSLPrincipalMapper, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		spec = "DEFAULT"
	}
	locs := ruleStart.FindAllStringSubmatchIndex(spec, -1)
	if len(locs) == 0 || strings.TrimSpace(spec[:locs[0][2]]) != "" {
		return nil, fmt.Errorf("ssl principal mapping rules %q: want DEFAULT or RULE:pattern/replacement/[LU]", spec)
	}
	m := &SSLPrincipalMapper{}
	for i, loc := range locs {
		end := len(spec)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		text := strings.TrimSpace(spec[loc[2]:end])
		if text == "DEFAULT" {
			m.rules = append(m.rules, sslRule{isDefault: true})
			continue
		}
		r, err := parseSSLRule(strings.TrimPrefix(text, "RULE:"))
		if err != nil {
			return nil, fmt.Errorf("ssl principal mapping rule %q: %w", text, err)
		}
		m.rules = append(m.rules, r)
	}
	return m, nil
}

func parseSSLRule(s string) (sslRule, error) {
	// pattern/replacement/ then optional L or U; a pattern may not hold an
	// unescaped slash, as in Kafka.
	parts := splitUnescaped(s, '/')
	if len(parts) != 3 {
		return sslRule{}, errors.New("want pattern/replacement/[LU]")
	}
	var r sslRule
	switch parts[2] {
	case "":
	case "L":
		r.toLower = true
	case "U":
		r.toUpper = true
	default:
		return sslRule{}, fmt.Errorf("flags %q: want L, U or nothing", parts[2])
	}
	re, err := regexp.Compile("^(?:" + parts[0] + ")$")
	if err != nil {
		return sslRule{}, err
	}
	r.pattern, r.replacement = re, parts[1]
	return r, nil
}

// splitUnescaped splits s at sep characters not preceded by a backslash.
func splitUnescaped(s string, sep byte) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// Map returns the principal name of a subject DN.
func (m *SSLPrincipalMapper) Map(dn string) (string, error) {
	for _, r := range m.rules {
		if r.isDefault {
			if dn == "" {
				return "", errors.New("ssl principal mapping: the certificate has an empty subject")
			}
			return dn, nil
		}
		match := r.pattern.FindStringSubmatchIndex(dn)
		if match == nil {
			continue
		}
		out := string(r.pattern.ExpandString(nil, r.replacement, dn, match))
		switch {
		case r.toLower:
			out = strings.ToLower(out)
		case r.toUpper:
			out = strings.ToUpper(out)
		}
		if out == "" {
			return "", fmt.Errorf("ssl principal mapping: %q maps to an empty name", dn)
		}
		return out, nil
	}
	return "", fmt.Errorf("ssl principal mapping: no rule matches %q", dn)
}

// CertificatePrincipal is the principal of a verified client certificate:
// User:<mapped subject DN>.
func (m *SSLPrincipalMapper) CertificatePrincipal(cert *x509.Certificate) (Principal, error) {
	name, err := m.Map(cert.Subject.String())
	if err != nil {
		return Principal{}, err
	}
	return User(name), nil
}
