package auth_test

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"

	"quire/internal/auth"
)

// handClient is a SCRAM-SHA-256 client written out step by step, so tests
// can send what real clients send and what they must not.
type handClient struct {
	user, password, clientNonce string
	firstBare                   string
}

func (c *handClient) first() string {
	c.firstBare = "n=" + c.user + ",r=" + c.clientNonce
	return "n,," + c.firstBare
}

// final answers serverFirst with the nonce nonce(combined) in r=.
func (c *handClient) final(t *testing.T, serverFirst string, nonce func(combined string) string) string {
	t.Helper()
	var combined, salt string
	var iterations int
	for _, f := range strings.Split(serverFirst, ",") {
		switch {
		case strings.HasPrefix(f, "r="):
			combined = f[2:]
		case strings.HasPrefix(f, "s="):
			salt = f[2:]
		case strings.HasPrefix(f, "i="):
			iterations, _ = strconv.Atoi(f[2:])
		}
	}
	rawSalt, err := base64.StdEncoding.DecodeString(salt)
	if err != nil || !strings.HasPrefix(combined, c.clientNonce) || iterations < auth.MinIterations {
		t.Fatalf("server-first %q", serverFirst)
	}
	salted, _ := pbkdf2.Key(sha256.New, c.password, rawSalt, iterations, sha256.Size)
	mac := func(key []byte, msg string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	withoutProof := "c=biws,r=" + nonce(combined)
	signature := mac(stored[:], c.firstBare+","+serverFirst+","+withoutProof)
	for i := range clientKey {
		clientKey[i] ^= signature[i]
	}
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(clientKey)
}

// TestSCRAMNonce: the client-final nonce is the server's, or (librdkafka
// 2.0.2) the client's nonce followed by it; nothing else, even with a
// valid proof over what was sent.
func TestSCRAMNonce(t *testing.T) {
	creds, _ := newCredentials(t)
	if _, err := creds.AddIfAbsent(context.Background(), "alice", "alice-secret"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		nonce func(client, combined string) string
		ok    bool
	}{
		{"as sent", func(_, combined string) string { return combined }, true},
		{"librdkafka: client nonce repeated", func(client, combined string) string { return client + combined }, true},
		{"another prefix", func(_, combined string) string { return "x" + combined }, false},
		{"truncated", func(_, combined string) string { return combined[:len(combined)-1] }, false},
		{"the client's alone", func(client, _ string) string { return client }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := &handClient{user: "alice", password: "alice-secret", clientNonce: `DIkCN\2GcD=pw|y@1V;>/N5`}
			s, _ := auth.NewServer(auth.MechanismSCRAMSHA256, creds)
			serverFirst, _, err := s.Step(ctx, []byte(c.first()))
			if err != nil {
				t.Fatal(err)
			}
			final := c.final(t, string(serverFirst), func(combined string) string { return tc.nonce(c.clientNonce, combined) })
			serverFinal, done, err := s.Step(ctx, []byte(final))
			if tc.ok != (err == nil && done) {
				t.Fatalf("done %v, err %v; want ok=%v", done, err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, auth.ErrAuthenticationFailed) {
				t.Fatalf("err %v is not ErrAuthenticationFailed", err)
			}
			if tc.ok && (!strings.HasPrefix(string(serverFinal), "v=") || s.Principal() != auth.User("alice")) {
				t.Fatalf("server-final %q, principal %v", serverFinal, s.Principal())
			}
		})
	}
}

func TestParseClientFirst(t *testing.T) {
	for _, tc := range []struct {
		msg      string
		user     string
		authz    string
		ext      string
		wantFail bool
	}{
		{msg: "n,,n=alice,r=abc", user: "alice"},
		{msg: "y,a=bob,n=alice,r=abc", user: "alice", authz: "bob"},
		{msg: "n,,n=a=2Cb=3Dc,r=abc,tokenauth=true", user: "a,b=c", ext: "true"},
		{msg: "p=tls-unique,,n=alice,r=abc", wantFail: true},
		{msg: "n,,m=x,n=alice,r=abc", wantFail: true},
		{msg: "n,,n=a=ZZ,r=abc", wantFail: true},
		{msg: "n,,n=,r=abc", wantFail: true},
		{msg: "n,,n=alice,r=", wantFail: true},
		{msg: "n,,n=alice,r=abc,novalue", wantFail: true},
		{msg: "x,,n=alice,r=abc", wantFail: true},
		{msg: "n,,", wantFail: true},
	} {
		got, err := auth.ParseClientFirst(tc.msg)
		if tc.wantFail {
			if err == nil {
				t.Errorf("%q parsed: %+v", tc.msg, got)
			}
			continue
		}
		if err != nil || got.User != tc.user || got.AuthzID != tc.authz || got.Extensions["tokenauth"] != tc.ext || got.GS2Header+got.Bare != tc.msg {
			t.Errorf("%q: %+v, %v", tc.msg, got, err)
		}
	}
}
