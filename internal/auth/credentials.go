package auth

// The user database: SCRAM credentials in the metadata store, one key per
// user under KeyPrefix holding that user's credential of each mechanism.
// What is stored is what RFC 5802 lets a server keep (salt, iterations,
// StoredKey, ServerKey); neither the password nor SaltedPassword (which
// would let its holder log in) is ever written. Every change is a
// read-modify-write with compare-and-swap, so concurrent changes of one
// user's credentials on several brokers never lose one another.

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/url"
	"sort"
	"strings"

	"quire/internal/meta"
)

// KeyPrefix is where the user database lives in the metadata store.
const KeyPrefix = "/quire/auth/users/"

// Iteration bounds of a SCRAM credential (Kafka's, for both mechanisms).
// RFC 7677 asks for at least 4096.
const (
	MinIterations = 4096
	MaxIterations = 16384
)

// maxCASAttempts bounds the retries of a read-modify-write that keeps
// losing its compare-and-swap to concurrent writers.
const maxCASAttempts = 16

// Sentinel errors of the user database; the Kafka front end maps them to
// wire codes once.
var (
	ErrUnknownUser       = errors.New("auth: no such user")
	ErrUnknownCredential = errors.New("auth: the user has no credential of this mechanism")
	ErrUnknownMechanism  = errors.New("auth: unknown SCRAM mechanism")
	ErrEmptyUser         = errors.New("auth: user name must not be empty")
	ErrTooFewIterations  = fmt.Errorf("auth: too few iterations (minimum %d)", MinIterations)
	ErrTooManyIterations = fmt.Errorf("auth: too many iterations (maximum %d)", MaxIterations)
	ErrBadSaltedPassword = errors.New("auth: salt empty or salted password of the wrong size")
)

// Mechanism is a SCRAM mechanism, numbered as Kafka's ScramMechanism (the
// mechanism field of DescribeUserScramCredentials and
// AlterUserScramCredentials).
type Mechanism int8

const (
	SCRAMSHA256 Mechanism = 1
	SCRAMSHA512 Mechanism = 2
)

// SCRAMMechanisms lists the SCRAM mechanisms, strongest first (PLAIN checks
// a password against the first one a user has).
var SCRAMMechanisms = []Mechanism{SCRAMSHA512, SCRAMSHA256}

func (m Mechanism) String() string {
	switch m {
	case SCRAMSHA256:
		return "SCRAM-SHA-256"
	case SCRAMSHA512:
		return "SCRAM-SHA-512"
	}
	return fmt.Sprintf("SCRAM-unknown(%d)", int8(m))
}

// Valid reports whether m is a known mechanism.
func (m Mechanism) Valid() bool { return m == SCRAMSHA256 || m == SCRAMSHA512 }

// ParseMechanism reads a SCRAM mechanism's SASL name.
func ParseMechanism(name string) (Mechanism, bool) {
	for _, m := range SCRAMMechanisms {
		if m.String() == name {
			return m, true
		}
	}
	return 0, false
}

func (m Mechanism) newHash() func() hash.Hash {
	if m == SCRAMSHA512 {
		return sha512.New
	}
	return sha256.New
}

// SCRAMCredential is what the server keeps of one user's password for one
// mechanism (RFC 5802 section 3).
type SCRAMCredential struct {
	Mechanism  Mechanism
	Salt       []byte
	Iterations int
	StoredKey  []byte // H(HMAC(SaltedPassword, "Client Key"))
	ServerKey  []byte // HMAC(SaltedPassword, "Server Key")
}

// NewSCRAMCredential salts password with a fresh random salt. The password
// is used as UTF-8 bytes without SASLprep, as Kafka's and franz-go's clients
// do.
func NewSCRAMCredential(m Mechanism, password string, iterations int) (SCRAMCredential, error) {
	if !m.Valid() {
		return SCRAMCredential{}, ErrUnknownMechanism
	}
	if err := checkIterations(iterations); err != nil {
		return SCRAMCredential{}, err
	}
	salt := make([]byte, 24)
	_, _ = rand.Read(salt) // never fails (crypto/rand's contract)
	salted, err := pbkdf2.Key(m.newHash(), password, salt, iterations, m.newHash()().Size())
	if err != nil {
		return SCRAMCredential{}, fmt.Errorf("salt password: %w", err)
	}
	return SCRAMCredentialFromSalted(m, salt, salted, iterations)
}

// SCRAMCredentialFromSalted derives the stored credential from
// SaltedPassword, which is what AlterUserScramCredentials carries (the
// client salts; the password never reaches the server).
func SCRAMCredentialFromSalted(m Mechanism, salt, saltedPassword []byte, iterations int) (SCRAMCredential, error) {
	if !m.Valid() {
		return SCRAMCredential{}, ErrUnknownMechanism
	}
	if err := checkIterations(iterations); err != nil {
		return SCRAMCredential{}, err
	}
	h := m.newHash()
	if len(salt) == 0 || len(saltedPassword) != h().Size() {
		return SCRAMCredential{}, ErrBadSaltedPassword
	}
	clientKey := hmacSum(h, saltedPassword, "Client Key")
	stored := h()
	stored.Write(clientKey)
	return SCRAMCredential{
		Mechanism:  m,
		Salt:       append([]byte(nil), salt...),
		Iterations: iterations,
		StoredKey:  stored.Sum(nil),
		ServerKey:  hmacSum(h, saltedPassword, "Server Key"),
	}, nil
}

// Matches reports whether password is the one c was made from (what PLAIN
// checks): it derives StoredKey and compares in constant time.
func (c SCRAMCredential) Matches(password string) bool {
	h := c.Mechanism.newHash()
	salted, err := pbkdf2.Key(h, password, c.Salt, c.Iterations, h().Size())
	if err != nil {
		return false
	}
	derived, err := SCRAMCredentialFromSalted(c.Mechanism, c.Salt, salted, c.Iterations)
	return err == nil && hmac.Equal(derived.StoredKey, c.StoredKey)
}

func checkIterations(n int) error {
	switch {
	case n < MinIterations:
		return ErrTooFewIterations
	case n > MaxIterations:
		return ErrTooManyIterations
	}
	return nil
}

func hmacSum(h func() hash.Hash, key []byte, msg string) []byte {
	mac := hmac.New(h, key)
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}

// storedUser is one user's key in the metadata store.
type storedUser struct {
	// SCRAM holds the credential of each mechanism, by its SASL name.
	SCRAM map[string]storedSCRAM `json:"scram"`
}

type storedSCRAM struct {
	Salt       []byte `json:"salt"`
	Iterations int    `json:"iterations"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
}

// Credentials is the user database on a metadata store.
type Credentials struct {
	store meta.Store
}

// NewCredentials returns the user database kept in store.
func NewCredentials(store meta.Store) *Credentials { return &Credentials{store: store} }

// userKey escapes the name so that any user name (with '/', '%', …) is one
// key under KeyPrefix.
func userKey(user string) string { return KeyPrefix + url.PathEscape(user) }

func (c *Credentials) get(ctx context.Context, user string) (storedUser, meta.Version, error) {
	var u storedUser
	v, err := meta.GetJSON(ctx, c.store, userKey(user), &u)
	if errors.Is(err, meta.ErrNotFound) {
		return storedUser{}, 0, ErrUnknownUser
	}
	if err != nil {
		return storedUser{}, 0, fmt.Errorf("read user %q: %w", user, err)
	}
	return u, v, nil
}

// SCRAM returns the user's credentials (ErrUnknownUser when there are
// none), strongest mechanism first.
func (c *Credentials) SCRAM(ctx context.Context, user string) ([]SCRAMCredential, error) {
	u, _, err := c.get(ctx, user)
	if err != nil {
		return nil, err
	}
	var out []SCRAMCredential
	for _, m := range SCRAMMechanisms {
		if s, ok := u.SCRAM[m.String()]; ok {
			out = append(out, SCRAMCredential{Mechanism: m, Salt: s.Salt, Iterations: s.Iterations, StoredKey: s.StoredKey, ServerKey: s.ServerKey})
		}
	}
	if len(out) == 0 {
		return nil, ErrUnknownUser
	}
	return out, nil
}

// Lookup returns the user's credential of one mechanism: ErrUnknownUser
// when the user has none of any, ErrUnknownCredential when not of m.
func (c *Credentials) Lookup(ctx context.Context, user string, m Mechanism) (SCRAMCredential, error) {
	creds, err := c.SCRAM(ctx, user)
	if err != nil {
		return SCRAMCredential{}, err
	}
	for _, cr := range creds {
		if cr.Mechanism == m {
			return cr, nil
		}
	}
	return SCRAMCredential{}, ErrUnknownCredential
}

// Upsert sets the user's credential of cred's mechanism, creating the user
// if needed.
func (c *Credentials) Upsert(ctx context.Context, user string, cred SCRAMCredential) error {
	if user == "" {
		return ErrEmptyUser
	}
	if !cred.Mechanism.Valid() {
		return ErrUnknownMechanism
	}
	if err := checkIterations(cred.Iterations); err != nil {
		return err
	}
	return c.update(ctx, user, func(u *storedUser) error {
		if u.SCRAM == nil {
			u.SCRAM = make(map[string]storedSCRAM)
		}
		u.SCRAM[cred.Mechanism.String()] = storedSCRAM{Salt: cred.Salt, Iterations: cred.Iterations, StoredKey: cred.StoredKey, ServerKey: cred.ServerKey}
		return nil
	})
}

// Delete removes the user's credential of mechanism m (ErrUnknownCredential
// when there is none); the user goes with its last credential.
func (c *Credentials) Delete(ctx context.Context, user string, m Mechanism) error {
	return c.update(ctx, user, func(u *storedUser) error {
		if _, ok := u.SCRAM[m.String()]; !ok {
			return ErrUnknownCredential
		}
		delete(u.SCRAM, m.String())
		return nil
	})
}

// AddIfAbsent gives a user without any credential one of every SCRAM
// mechanism for password (the bootstrap of an admin user); a user who has
// credentials keeps them, so a password changed since is not reset. It
// reports whether it added them.
func (c *Credentials) AddIfAbsent(ctx context.Context, user, password string) (bool, error) {
	if user == "" {
		return false, ErrEmptyUser
	}
	var creds []SCRAMCredential
	for _, m := range SCRAMMechanisms {
		cred, err := NewSCRAMCredential(m, password, MinIterations)
		if err != nil {
			return false, err
		}
		creds = append(creds, cred)
	}
	added := false
	err := c.update(ctx, user, func(u *storedUser) error {
		if len(u.SCRAM) > 0 {
			added = false
			return errUnchanged
		}
		u.SCRAM = make(map[string]storedSCRAM)
		for _, cred := range creds {
			u.SCRAM[cred.Mechanism.String()] = storedSCRAM{Salt: cred.Salt, Iterations: cred.Iterations, StoredKey: cred.StoredKey, ServerKey: cred.ServerKey}
		}
		added = true
		return nil
	})
	return added, err
}

// errUnchanged ends an update that has nothing to write.
var errUnchanged = errors.New("unchanged")

// update applies change to the user's record with compare-and-swap,
// retrying when a concurrent writer got there first. A record left without
// credentials is deleted.
func (c *Credentials) update(ctx context.Context, user string, change func(*storedUser) error) error {
	for range maxCASAttempts {
		u, version, err := c.get(ctx, user)
		if err != nil && !errors.Is(err, ErrUnknownUser) {
			return err
		}
		if err := change(&u); err != nil {
			if errors.Is(err, errUnchanged) {
				return nil
			}
			if errors.Is(err, ErrUnknownCredential) && version == 0 {
				return ErrUnknownUser
			}
			return err
		}
		key := userKey(user)
		switch {
		case len(u.SCRAM) == 0 && version == 0:
			return nil
		case len(u.SCRAM) == 0:
			err = c.store.Delete(ctx, key, version)
		default:
			value, merr := json.Marshal(u)
			if merr != nil {
				return fmt.Errorf("encode user %q: %w", user, merr)
			}
			if version == 0 {
				_, err = c.store.Create(ctx, key, value)
			} else {
				_, err = c.store.Put(ctx, key, value, version)
			}
		}
		if errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrExists) || errors.Is(err, meta.ErrNotFound) {
			continue // a concurrent change: read again
		}
		if err != nil {
			return fmt.Errorf("write user %q: %w", user, err)
		}
		return nil
	}
	return fmt.Errorf("write user %q: %d compare-and-swap attempts lost to concurrent writers", user, maxCASAttempts)
}

// CredentialInfo is what may be shown of a credential
// (DescribeUserScramCredentials): never its keys or salt.
type CredentialInfo struct {
	Mechanism  Mechanism
	Iterations int
}

// Describe returns the mechanisms and iterations of the named users' credentials
// (all users when names is nil), by user; a named user without credentials
// is absent from the map.
func (c *Credentials) Describe(ctx context.Context, names []string) (map[string][]CredentialInfo, error) {
	out := make(map[string][]CredentialInfo)
	add := func(user string, u storedUser) {
		for _, m := range SCRAMMechanisms {
			if s, ok := u.SCRAM[m.String()]; ok {
				out[user] = append(out[user], CredentialInfo{Mechanism: m, Iterations: s.Iterations})
			}
		}
	}
	if names != nil {
		for _, name := range names {
			u, _, err := c.get(ctx, name)
			if errors.Is(err, ErrUnknownUser) {
				continue
			}
			if err != nil {
				return nil, err
			}
			add(name, u)
		}
		return out, nil
	}
	kvs, _, err := meta.ListAll(ctx, c.store, KeyPrefix)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	for _, kv := range kvs {
		name, err := url.PathUnescape(strings.TrimPrefix(kv.Key, KeyPrefix))
		if err != nil {
			continue // not a key of ours
		}
		var u storedUser
		if err := json.Unmarshal(kv.Value, &u); err != nil {
			return nil, fmt.Errorf("decode user %q: %w", name, err)
		}
		add(name, u)
	}
	return out, nil
}

// Users returns the names Describe(ctx, nil) would, sorted.
func Users(described map[string][]CredentialInfo) []string {
	names := make([]string, 0, len(described))
	for n := range described {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
