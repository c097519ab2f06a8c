package auth

// The server side of SCRAM (RFC 5802, with SHA-256 and SHA-512 as RFC 7677
// and Kafka use them): two rounds.
//
//	client-first  gs2-header client-first-bare
//	              gs2-header        = ("n" | "y") "," ["a=" saslname] ","
//	              client-first-bare = "n=" saslname ",r=" c-nonce *("," key "=" value)
//	server-first  "r=" c-nonce s-nonce ",s=" base64(salt) ",i=" iterations
//	client-final  "c=" base64(gs2-header) ",r=" nonce *("," ext) ",p=" base64(proof)
//	server-final  "v=" base64(ServerSignature)
//
// AuthMessage = client-first-bare "," server-first "," client-final
// without its proof; the client proves it knows SaltedPassword
// (ClientKey = proof XOR HMAC(StoredKey, AuthMessage), H(ClientKey) =
// StoredKey) and the server proves it holds ServerKey.
//
// Kafka's rules, kept here: saslnames decode "=2C" and "=3D" (any other '='
// escape is malformed); the extensions after the nonce are Kafka's
// ScramExtensions, tokenauth=true (delegation tokens) is refused and
// others are ignored; a mandatory extension (m=) is refused; channel
// binding ("p=") is not offered. One leniency, which Kafka's endsWith
// check on the nonce allowed and a client relies on: the client-final
// nonce may be the client's nonce followed by the combined nonce, as
// librdkafka 2.0.2 (the kcat Quire's interop runs) sends it. The proof
// covers the message as sent, so this admits no one else; Kafka's newest
// ScramSaslServer compares with equals and refuses that client.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// scramFailed is Kafka's answer to every SCRAM failure but the authzid
// one; it says nothing of whether the user exists.
func scramFailed(m Mechanism) string {
	return "Authentication failed during authentication due to invalid credentials with SASL mechanism " + m.String()
}

type scramServer struct {
	mech  Mechanism
	creds *Credentials
	step  int

	user            string
	cred            SCRAMCredential
	gs2Header       string
	clientNonce     string
	nonce           string // c-nonce s-nonce
	clientFirstBare string
	serverFirst     string
	principal       Principal
}

func newSCRAMServer(m Mechanism, creds *Credentials) *scramServer {
	return &scramServer{mech: m, creds: creds}
}

func (s *scramServer) Principal() Principal { return s.principal }

func (s *scramServer) failed(why error) error {
	return &Failure{Message: scramFailed(s.mech), Cause: why}
}

func (s *scramServer) Step(ctx context.Context, token []byte) ([]byte, bool, error) {
	s.step++
	switch s.step {
	case 1:
		return s.first(ctx, string(token))
	case 2:
		return s.final(string(token))
	}
	return nil, false, s.failed(errors.New("SCRAM exchange already complete"))
}

func (s *scramServer) first(ctx context.Context, msg string) ([]byte, bool, error) {
	first, err := ParseClientFirst(msg)
	if err != nil {
		return nil, false, s.failed(err)
	}
	if first.Extensions["tokenauth"] == "true" {
		return nil, false, s.failed(errors.New("delegation-token authentication (tokenauth) is not supported"))
	}
	cred, err := s.creds.Lookup(ctx, first.User, s.mech)
	switch {
	case errors.Is(err, ErrUnknownUser), errors.Is(err, ErrUnknownCredential):
		// Go on with a credential no password matches: the exchange
		// fails at the proof, like a wrong password.
		cred = fakeCredential(s.mech, first.User)
	case err != nil:
		return nil, false, fmt.Errorf("look up SCRAM credential of %q: %w", first.User, err)
	}
	if first.AuthzID != "" && first.AuthzID != first.User {
		return nil, false, &Failure{Message: otherAuthzID}
	}
	var serverNonce [24]byte
	_, _ = rand.Read(serverNonce[:])
	s.user, s.cred, s.gs2Header, s.clientNonce, s.clientFirstBare = first.User, cred, first.GS2Header, first.Nonce, first.Bare
	s.nonce = first.Nonce + base64.RawURLEncoding.EncodeToString(serverNonce[:])
	s.serverFirst = "r=" + s.nonce + ",s=" + base64.StdEncoding.EncodeToString(cred.Salt) + ",i=" + strconv.Itoa(cred.Iterations)
	return []byte(s.serverFirst), false, nil
}

func (s *scramServer) final(msg string) ([]byte, bool, error) {
	final, err := ParseClientFinal(msg)
	if err != nil {
		return nil, false, s.failed(err)
	}
	if !bytes.Equal(final.ChannelBinding, []byte(s.gs2Header)) {
		return nil, false, s.failed(errors.New("channel binding does not repeat the gs2 header"))
	}
	if final.Nonce != s.nonce && final.Nonce != s.clientNonce+s.nonce {
		return nil, false, s.failed(errors.New("nonce is not the one the server sent"))
	}
	h := s.mech.newHash()
	if len(final.Proof) != h().Size() {
		return nil, false, s.failed(fmt.Errorf("proof of %d bytes", len(final.Proof)))
	}
	authMessage := s.clientFirstBare + "," + s.serverFirst + "," + final.WithoutProof
	clientSignature := hmacSum(h, s.cred.StoredKey, authMessage)
	clientKey := make([]byte, len(final.Proof))
	for i := range clientKey {
		clientKey[i] = final.Proof[i] ^ clientSignature[i]
	}
	stored := h()
	stored.Write(clientKey)
	if !hmac.Equal(stored.Sum(nil), s.cred.StoredKey) {
		return nil, false, s.failed(errors.New("invalid client proof"))
	}
	s.principal = User(s.user)
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacSum(h, s.cred.ServerKey, authMessage))), true, nil
}

// ClientFirst is a parsed SCRAM client-first message.
type ClientFirst struct {
	GS2Header  string // "n,," or "y,a=alice," …, as sent
	AuthzID    string // decoded
	User       string // decoded
	Nonce      string
	Bare       string // client-first-message-bare, as sent
	Extensions map[string]string
}

// ParseClientFirst reads a client-first message (see the file comment).
func ParseClientFirst(msg string) (ClientFirst, error) {
	var out ClientFirst
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok {
		return out, errors.New("client-first: no gs2 header")
	}
	switch {
	case flag == "n" || flag == "y":
	case strings.HasPrefix(flag, "p="):
		return out, errors.New("client-first: channel binding is not supported")
	default:
		return out, fmt.Errorf("client-first: bad channel-binding flag %q", flag)
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return out, errors.New("client-first: gs2 header not ended")
	}
	if authz != "" {
		raw, ok := strings.CutPrefix(authz, "a=")
		if !ok {
			return out, fmt.Errorf("client-first: bad authzid field %q", authz)
		}
		if out.AuthzID, ok = decodeSASLName(raw); !ok || out.AuthzID == "" {
			return out, fmt.Errorf("client-first: bad authzid %q", raw)
		}
	}
	out.GS2Header = flag + "," + authz + ","
	out.Bare = bare
	fields := strings.Split(bare, ",")
	if len(fields) < 2 {
		return out, errors.New("client-first: too few fields")
	}
	if strings.HasPrefix(fields[0], "m=") {
		return out, errors.New("client-first: mandatory extension not supported")
	}
	rawUser, ok := strings.CutPrefix(fields[0], "n=")
	if !ok {
		return out, errors.New("client-first: no user name")
	}
	if out.User, ok = decodeSASLName(rawUser); !ok || out.User == "" {
		return out, fmt.Errorf("client-first: bad user name %q", rawUser)
	}
	if out.Nonce, ok = strings.CutPrefix(fields[1], "r="); !ok || !printable(out.Nonce) {
		return out, errors.New("client-first: bad nonce")
	}
	for _, ext := range fields[2:] {
		key, value, ok := strings.Cut(ext, "=")
		if !ok || key == "" {
			return out, fmt.Errorf("client-first: malformed extension %q", ext)
		}
		if out.Extensions == nil {
			out.Extensions = make(map[string]string)
		}
		out.Extensions[key] = value
	}
	return out, nil
}

// ClientFinal is a parsed SCRAM client-final message.
type ClientFinal struct {
	ChannelBinding []byte // decoded c=
	Nonce          string
	Proof          []byte // decoded p=
	WithoutProof   string // client-final-message-without-proof, as sent
}

// ParseClientFinal reads a client-final message: c= and r= first, p= last,
// extensions between them ignored.
func ParseClientFinal(msg string) (ClientFinal, error) {
	var out ClientFinal
	cut := strings.LastIndex(msg, ",p=")
	if cut < 0 {
		return out, errors.New("client-final: no proof")
	}
	out.WithoutProof = msg[:cut]
	proof, err := base64.StdEncoding.DecodeString(msg[cut+len(",p="):])
	if err != nil {
		return out, fmt.Errorf("client-final: proof: %w", err)
	}
	out.Proof = proof
	fields := strings.Split(out.WithoutProof, ",")
	if len(fields) < 2 {
		return out, errors.New("client-final: too few fields")
	}
	rawBinding, ok := strings.CutPrefix(fields[0], "c=")
	if !ok {
		return out, errors.New("client-final: no channel binding")
	}
	if out.ChannelBinding, err = base64.StdEncoding.DecodeString(rawBinding); err != nil {
		return out, fmt.Errorf("client-final: channel binding: %w", err)
	}
	if out.Nonce, ok = strings.CutPrefix(fields[1], "r="); !ok || !printable(out.Nonce) {
		return out, errors.New("client-final: bad nonce")
	}
	return out, nil
}

// decodeSASLName undoes RFC 5802's escaping of ',' and '=' in names.
func decodeSASLName(s string) (string, bool) {
	if !strings.Contains(s, "=") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// printable is RFC 5802's nonce alphabet: %x21-7E except ','; not empty.
func printable(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == ',' {
			return false
		}
	}
	return true
}
