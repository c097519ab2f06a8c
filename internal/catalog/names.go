package catalog

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	// DefaultTenant and DefaultNamespace are created by Admin.EnsureDefaults;
	// Kafka topics live in DefaultNamespace unless configured otherwise.
	DefaultTenant    = "public"
	DefaultNamespace = "public/default"

	// MaxTopicNameLen is Kafka's limit on topic names.
	MaxTopicNameLen = 249
	// maxNamePartLen bounds tenant and namespace names.
	maxNamePartLen = 249

	persistentScheme = "persistent://"
	partitionInfix   = "-partition-"
)

// validName reports whether s uses only [a-zA-Z0-9._-], has 1..max
// characters and is not "." or ".." (which would read as path steps).
func validName(s string, max int) bool {
	if len(s) == 0 || len(s) > max || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidateTopicName checks a Kafka topic name: [a-zA-Z0-9._-], 1..249
// characters, not "." or "..". It fails with ErrInvalidTopicName.
func ValidateTopicName(name string) error {
	if !validName(name, MaxTopicNameLen) {
		return fmt.Errorf("topic %q: %w", name, ErrInvalidTopicName)
	}
	return nil
}

// ValidateTenant checks a tenant name (same alphabet as topics).
func ValidateTenant(tenant string) error {
	if !validName(tenant, maxNamePartLen) {
		return fmt.Errorf("tenant %q: %w", tenant, ErrInvalidName)
	}
	return nil
}

// ParseNamespace splits "tenant/ns" and validates both parts (ErrInvalidName).
func ParseNamespace(ns string) (tenant, name string, err error) {
	tenant, name, ok := strings.Cut(ns, "/")
	if !ok || !validName(tenant, maxNamePartLen) || !validName(name, maxNamePartLen) {
		return "", "", fmt.Errorf("namespace %q (want tenant/name): %w", ns, ErrInvalidName)
	}
	return tenant, name, nil
}

// PartitionName is the managed-ledger (topic) name of partition i of Kafka
// topic `topic` in namespace ns ("tenant/ns"):
// persistent://<tenant>/<ns>/<topic>-partition-<i>. Bundles hash this name.
func PartitionName(ns, topic string, partition int32) string {
	return persistentScheme + ns + "/" + topic + partitionInfix + strconv.FormatInt(int64(partition), 10)
}

// ParsePartitionName inverts PartitionName. The topic part may itself contain
// "-partition-": the last occurrence separates the index.
func ParsePartitionName(name string) (ns, topic string, partition int32, err error) {
	ns, local, err := splitTopicName(name)
	if err != nil {
		return "", "", 0, err
	}
	i := strings.LastIndex(local, partitionInfix)
	if i <= 0 {
		return "", "", 0, fmt.Errorf("partition name %q: no %q suffix: %w", name, partitionInfix, ErrInvalidTopicName)
	}
	digits := local[i+len(partitionInfix):]
	p, perr := strconv.ParseInt(digits, 10, 32)
	if perr != nil || p < 0 || strconv.FormatInt(p, 10) != digits {
		return "", "", 0, fmt.Errorf("partition name %q: bad index %q: %w", name, digits, ErrInvalidTopicName)
	}
	topic = local[:i]
	if err := ValidateTopicName(topic); err != nil {
		return "", "", 0, fmt.Errorf("partition name %q: %w", name, err)
	}
	return ns, topic, int32(p), nil
}

// splitTopicName splits persistent://tenant/ns/local into "tenant/ns" and local.
func splitTopicName(name string) (ns, local string, err error) {
	rest, ok := strings.CutPrefix(name, persistentScheme)
	if !ok {
		return "", "", fmt.Errorf("topic name %q: want %s<tenant>/<ns>/<name>: %w", name, persistentScheme, ErrInvalidTopicName)
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[2] == "" {
		return "", "", fmt.Errorf("topic name %q: want %s<tenant>/<ns>/<name>: %w", name, persistentScheme, ErrInvalidTopicName)
	}
	ns = parts[0] + "/" + parts[1]
	if _, _, err := ParseNamespace(ns); err != nil {
		return "", "", fmt.Errorf("topic name %q: %w", name, err)
	}
	return ns, parts[2], nil
}

// NamespaceOf returns the "tenant/ns" of a persistent:// topic name.
func NamespaceOf(name string) (string, error) {
	ns, _, err := splitTopicName(name)
	return ns, err
}
