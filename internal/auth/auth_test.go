package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"quire/internal/auth"
	"quire/internal/meta"
)

func newCredentials(t testing.TB) (*auth.Credentials, meta.Store) {
	t.Helper()
	srv := meta.NewMemServer(meta.MemConfig{})
	c := srv.NewClient()
	t.Cleanup(func() { c.Close() })
	return auth.NewCredentials(c), c
}

// exchange runs a whole SASL exchange between a franz-go client mechanism
// and our server, as the Kafka front end would relay it.
func exchange(t *testing.T, creds *auth.Credentials, client sasl.Mechanism) (auth.Principal, error) {
	t.Helper()
	ctx := context.Background()
	server, err := auth.NewServer(client.Name(), creds)
	if err != nil {
		t.Fatal(err)
	}
	session, token, err := client.Authenticate(ctx, "broker")
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		challenge, done, err := server.Step(ctx, token)
		if err != nil {
			return auth.Principal{}, err
		}
		clientDone, next, err := session.Challenge(challenge)
		if err != nil {
			t.Fatalf("client refused the server's answer: %v", err)
		}
		if done != clientDone {
			t.Fatalf("server done %v, client done %v", done, clientDone)
		}
		if done {
			return server.Principal(), nil
		}
		token = next
	}
	t.Fatal("exchange did not end")
	return auth.Principal{}, nil
}

func TestSASLMechanisms(t *testing.T) {
	creds, _ := newCredentials(t)
	ctx := context.Background()
	if added, err := creds.AddIfAbsent(ctx, "alice", "alice-secret"); err != nil || !added {
		t.Fatalf("AddIfAbsent = %v, %v", added, err)
	}
	// A second bootstrap leaves the credentials alone.
	if added, err := creds.AddIfAbsent(ctx, "alice", "other"); err != nil || added {
		t.Fatalf("second AddIfAbsent = %v, %v", added, err)
	}
	// bob has only a SCRAM-SHA-256 credential, set from a salted password
	// as AlterUserScramCredentials carries it.
	bob, err := auth.NewSCRAMCredential(auth.SCRAMSHA256, "bob-secret", 8192)
	if err != nil {
		t.Fatal(err)
	}
	if err := creds.Upsert(ctx, "bob", bob); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		client sasl.Mechanism
		want   string // principal, or "" for refused
	}{
		{"plain", plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism(), "User:alice"},
		{"plain wrong password", plain.Auth{User: "alice", Pass: "nope"}.AsMechanism(), ""},
		{"plain unknown user", plain.Auth{User: "mallory", Pass: "x"}.AsMechanism(), ""},
		{"plain other authzid", plain.Auth{Zid: "bob", User: "alice", Pass: "alice-secret"}.AsMechanism(), ""},
		{"plain same authzid", plain.Auth{Zid: "alice", User: "alice", Pass: "alice-secret"}.AsMechanism(), "User:alice"},
		{"plain against sha-256 only", plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism(), "User:bob"},
		{"scram-256", scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism(), "User:alice"},
		{"scram-512", scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism(), "User:alice"},
		{"scram-512 wrong password", scram.Auth{User: "alice", Pass: "nope"}.AsSha512Mechanism(), ""},
		{"scram-256 unknown user", scram.Auth{User: "mallory", Pass: "x"}.AsSha256Mechanism(), ""},
		{"scram-512 mechanism the user lacks", scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism(), ""},
		{"scram-256 bob", scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism(), "User:bob"},
		{"scram other authzid", scram.Auth{Zid: "bob", User: "alice", Pass: "alice-secret"}.AsSha256Mechanism(), ""},
		{"scram delegation token", scram.Auth{User: "alice", Pass: "alice-secret", IsToken: true}.AsSha256Mechanism(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := exchange(t, creds, tc.client)
			if tc.want == "" {
				if !errors.Is(err, auth.ErrAuthenticationFailed) {
					t.Fatalf("got %v, %v; want ErrAuthenticationFailed", p, err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("error shows a password: %v", err)
				}
				return
			}
			if err != nil || p.String() != tc.want {
				t.Fatalf("got %v, %v; want %s", p, err, tc.want)
			}
		})
	}
}

// TestUnknownUserLooksLikeWrongPassword: SCRAM answers an unknown user's
// client-first like a known user's, with a salt that does not change
// between attempts, so probing does not reveal who exists.
func TestUnknownUserLooksLikeWrongPassword(t *testing.T) {
	creds, _ := newCredentials(t)
	first := func(user string) string {
		s, _ := auth.NewServer(auth.MechanismSCRAMSHA256, creds)
		out, _, err := s.Step(context.Background(), []byte("n,,n="+user+",r=abcdefgh"))
		if err != nil {
			t.Fatalf("client-first of %s: %v", user, err)
		}
		fields := strings.Split(string(out), ",")
		if len(fields) != 3 || !strings.HasPrefix(fields[0], "r=abcdefgh") {
			t.Fatalf("server-first %q", out)
		}
		return fields[1] + "," + fields[2]
	}
	if a, b := first("ghost"), first("ghost"); a != b {
		t.Fatalf("an unknown user's salt changes between attempts: %s then %s", a, b)
	}
	if first("ghost") == first("phantom") {
		t.Fatal("two unknown users share a salt")
	}
}

func TestCredentialStore(t *testing.T) {
	creds, store := newCredentials(t)
	ctx := context.Background()
	if _, err := creds.SCRAM(ctx, "nobody"); !errors.Is(err, auth.ErrUnknownUser) {
		t.Fatalf("unknown user: %v", err)
	}
	for _, bad := range []struct {
		iterations int
		want       error
	}{{4095, auth.ErrTooFewIterations}, {16385, auth.ErrTooManyIterations}} {
		if _, err := auth.NewSCRAMCredential(auth.SCRAMSHA256, "pw", bad.iterations); !errors.Is(err, bad.want) {
			t.Errorf("%d iterations: %v, want %v", bad.iterations, err, bad.want)
		}
	}
	if _, err := auth.SCRAMCredentialFromSalted(auth.SCRAMSHA512, []byte("salt"), make([]byte, 32), 4096); !errors.Is(err, auth.ErrBadSaltedPassword) {
		t.Errorf("a SHA-256-sized salted password for SCRAM-SHA-512: %v", err)
	}
	c256, _ := auth.NewSCRAMCredential(auth.SCRAMSHA256, "pw/with%odd:chars", 4096)
	c512, _ := auth.NewSCRAMCredential(auth.SCRAMSHA512, "correct-horse-battery", 5000)
	for _, user := range []string{"a/b", "carol"} {
		if err := creds.Upsert(ctx, user, c256); err != nil {
			t.Fatal(err)
		}
	}
	if err := creds.Upsert(ctx, "carol", c512); err != nil {
		t.Fatal(err)
	}
	got, err := creds.Describe(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if users := auth.Users(got); strings.Join(users, " ") != "a/b carol" {
		t.Fatalf("users %v", users)
	}
	if len(got["carol"]) != 2 || got["carol"][0] != (auth.CredentialInfo{Mechanism: auth.SCRAMSHA512, Iterations: 5000}) {
		t.Fatalf("carol: %+v", got["carol"])
	}
	if !c256.Matches("pw/with%odd:chars") || c256.Matches("pw") || !c512.Matches("correct-horse-battery") {
		t.Fatal("Matches")
	}
	// Nothing secret is stored: no password, no salted password.
	kvs, _, err := meta.ListAll(ctx, store, auth.KeyPrefix)
	if err != nil || len(kvs) != 2 {
		t.Fatalf("list: %v, %d keys", err, len(kvs))
	}
	for _, kv := range kvs {
		if strings.Contains(string(kv.Value), "odd:chars") || strings.Contains(string(kv.Value), "horse") {
			t.Fatalf("%s holds the password: %s", kv.Key, kv.Value)
		}
	}
	if err := creds.Delete(ctx, "carol", auth.SCRAMSHA256); err != nil {
		t.Fatal(err)
	}
	if err := creds.Delete(ctx, "carol", auth.SCRAMSHA256); !errors.Is(err, auth.ErrUnknownCredential) {
		t.Fatalf("second delete: %v", err)
	}
	if err := creds.Delete(ctx, "carol", auth.SCRAMSHA512); err != nil {
		t.Fatal(err)
	}
	if err := creds.Delete(ctx, "carol", auth.SCRAMSHA512); !errors.Is(err, auth.ErrUnknownUser) {
		t.Fatalf("delete after the last credential: %v", err)
	}
	if _, err := store.Get(ctx, auth.KeyPrefix+"carol"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("carol's key outlived her last credential: %v", err)
	}
}
