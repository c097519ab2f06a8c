package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"quire/internal/auth"
)

func TestTokensCommand(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "secret.key")
	run := func(args ...string) string {
		t.Helper()
		cmd := newTokensCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("quire tokens %s: %v (%s)", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	run("create-secret-key", "--output", keyFile)
	if fi, err := os.Stat(keyFile); err != nil || fi.Size() != auth.MinSecretKeyBytes || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret key file: %v, %v", fi, err)
	}
	token := strings.TrimSpace(run("create", "--secret-key", "file://"+keyFile, "--subject", "alice", "--expiry", "1h"))
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewSecretKeyValidator(key)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := v.Validate(token)
	if err != nil || claims.Role != "alice" || claims.Expiry.Before(time.Now().Add(59*time.Minute)) || claims.Expiry.After(time.Now().Add(time.Hour)) {
		t.Fatalf("token %q: %+v, %v", token, claims, err)
	}
	// The base64 form goes to the broker as a data: URL.
	b64 := strings.TrimSpace(run("create-secret-key", "--base64"))
	if k, err := auth.ReadTokenKey("data:;base64," + b64); err != nil || len(k) != auth.MinSecretKeyBytes {
		t.Fatalf("base64 key %q: %d bytes, %v", b64, len(k), err)
	}
}

func TestPulsarSecurityFlags(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags pulsarSecurityFlags
		ok    bool
	}{
		{name: "off", ok: true},
		{name: "token and tls", ok: true, flags: pulsarSecurityFlags{providers: []string{"token", "tls"}, tokenSecretKey: "file://" + keyFile,
			authorization: true, superUserRoles: []string{"admin"}, anonymousRole: "anonymous"}},
		{name: "token without a key", flags: pulsarSecurityFlags{providers: []string{"token"}}},
		{name: "two keys", flags: pulsarSecurityFlags{providers: []string{"token"}, tokenSecretKey: keyFile, tokenPublicKey: keyFile}},
		{name: "a short secret", flags: pulsarSecurityFlags{providers: []string{"token"}, tokenSecretKey: "data:;base64,c2hvcnQ="}},
		{name: "unknown provider", flags: pulsarSecurityFlags{providers: []string{"basic"}}},
		{name: "authorization without authentication", flags: pulsarSecurityFlags{authorization: true}},
		{name: "a key without the token provider", flags: pulsarSecurityFlags{providers: []string{"tls"}, tokenSecretKey: keyFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec, err := tc.flags.security()
			if !tc.ok {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.flags.providers) > 0 && (sec.Authenticator == nil || !sec.Authenticator.Supports("token") || !sec.Authenticator.Supports("tls") || !sec.Authorization) {
				t.Fatalf("security %+v", sec)
			}
		})
	}
}
