package auth

// The server side of SASL mechanisms as token exchanges: a Server takes
// each token the client sends and returns the one to send back, until it
// is done and names the principal. Wire framing (Kafka's SaslAuthenticate,
// or v0's raw tokens) is the front end's.
//
//	PLAIN          RFC 4616: one token "authzid NUL user NUL password";
//	               checked against the user's SCRAM credential (one user
//	               database), strongest mechanism first.
//	SCRAM-SHA-256  RFC 5802 / RFC 7677 (scram.go), with Kafka's rules:
//	SCRAM-SHA-512  channel binding is not offered ("n" and "y" accepted,
//	               "p" refused); an authzid other than the user name is
//	               refused; extensions in client-first are Kafka's
//	               ScramExtensions: tokenauth=true (delegation tokens,
//	               which Quire has not) is refused, others ignored.
//
// An unknown user is not told apart from a wrong password: SCRAM answers it
// with a made-up salt derived from the name (stable, so probing twice shows
// nothing) and fails at the proof, as a wrong password does; PLAIN derives
// against a made-up credential too, so both take the same time.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// SASL mechanism names.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// Mechanisms lists the SASL mechanisms NewServer knows.
var Mechanisms = []string{MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512}

// ErrAuthenticationFailed: the client's credentials (or its messages) do
// not authenticate it. Step wraps it in a *Failure; other errors from Step
// (the metadata store unreachable) are not about the client.
var ErrAuthenticationFailed = errors.New("authentication failed")

// Failure is a refused authentication: Message is what the client may be
// told (Kafka's wording, never whether the user exists), Cause what the
// log may say besides.
type Failure struct {
	Message string
	Cause   error
}

func (f *Failure) Error() string {
	if f.Cause == nil {
		return f.Message
	}
	return f.Message + ": " + f.Cause.Error()
}

func (f *Failure) Unwrap() []error { return []error{ErrAuthenticationFailed, f.Cause} }

// Server is the server side of one SASL exchange.
type Server interface {
	// Step takes the client's next token and returns the one to send
	// back; done is true once the client is authenticated (the returned
	// token, if any, is still sent). An error ends the exchange:
	// ErrAuthenticationFailed (wrapped, with a message fit for the client)
	// for bad credentials, anything else for a failure of ours.
	Step(ctx context.Context, token []byte) (challenge []byte, done bool, err error)
	// Principal is who the client is, once Step returned done.
	Principal() Principal
}

// NewServer starts an exchange of the named mechanism against creds.
func NewServer(mechanism string, creds *Credentials) (Server, error) {
	switch mechanism {
	case MechanismPlain:
		return &plainServer{creds: creds}, nil
	case MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		m, _ := ParseMechanism(mechanism)
		return newSCRAMServer(m, creds), nil
	}
	return nil, fmt.Errorf("auth: unknown SASL mechanism %q", mechanism)
}

// ParsePlain splits a PLAIN token (RFC 4616: authzid NUL authcid NUL
// passwd): exactly three fields, user and password not empty. A malformed
// token gets Kafka's generic answer (its PlainSaslServer throws a
// SaslException, whose text the client is not shown); Kafka ignores what
// follows a third NUL where this refuses it, as RFC 4616 has no NUL in a
// password.
func ParsePlain(token []byte) (authzID, user, password string, err error) {
	fields := bytes.Split(token, []byte{0})
	if len(fields) != 3 {
		return "", "", "", &Failure{Message: plainFailed, Cause: fmt.Errorf("invalid SASL/PLAIN response: expected 3 tokens, got %d", len(fields))}
	}
	authzID, user, password = string(fields[0]), string(fields[1]), string(fields[2])
	if user == "" {
		return "", "", "", &Failure{Message: plainFailed, Cause: errors.New("username not specified")}
	}
	if password == "" {
		return "", "", "", &Failure{Message: plainFailed, Cause: errors.New("password not specified")}
	}
	return authzID, user, password, nil
}

// Kafka's answers to a failed authentication.
const (
	plainFailed     = "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN"
	otherAuthzID    = "Authentication failed: Client requested an authorization id that is different from username"
	invalidPassword = "Authentication failed: Invalid username or password"
)

type plainServer struct {
	creds     *Credentials
	principal Principal
	done      bool
}

func (p *plainServer) Principal() Principal { return p.principal }

func (p *plainServer) Step(ctx context.Context, token []byte) ([]byte, bool, error) {
	if p.done {
		return nil, false, &Failure{Message: plainFailed, Cause: errors.New("PLAIN exchange already complete")}
	}
	p.done = true
	authzID, user, password, err := ParsePlain(token)
	if err != nil {
		return nil, false, err
	}
	creds, err := p.creds.SCRAM(ctx, user)
	switch {
	case errors.Is(err, ErrUnknownUser):
		fakeCredential(SCRAMSHA512, user).Matches(password) // same work as a known user
		return nil, false, &Failure{Message: invalidPassword}
	case err != nil:
		return nil, false, err
	}
	if !creds[0].Matches(password) {
		return nil, false, &Failure{Message: invalidPassword}
	}
	// As Kafka, the authorization id is checked once the password is.
	if authzID != "" && authzID != user {
		return nil, false, &Failure{Message: otherAuthzID}
	}
	p.principal = User(user)
	return nil, true, nil
}

// fakeSecret keys the made-up credentials of unknown users; it is random
// per process, so nothing about them can be computed offline.
var fakeSecret = func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}()

// fakeCredential is a credential nobody's password matches, with a salt
// that is the same every time the same name is asked for.
func fakeCredential(m Mechanism, user string) SCRAMCredential {
	mac := hmac.New(sha256.New, fakeSecret)
	mac.Write([]byte(m.String() + "\x00" + user))
	sum := mac.Sum(nil)
	size := m.newHash()().Size()
	key := make([]byte, size)
	_, _ = rand.Read(key)
	return SCRAMCredential{Mechanism: m, Salt: sum[:24], Iterations: MinIterations, StoredKey: key, ServerKey: key}
}
