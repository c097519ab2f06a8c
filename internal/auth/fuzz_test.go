package auth_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"quire/internal/auth"
)

// FuzzParsePlain: any bytes either parse into exactly the three fields the
// token is made of (user and password not empty), or fail with
// ErrAuthenticationFailed; never a panic.
func FuzzParsePlain(f *testing.F) {
	for _, seed := range []string{"\x00alice\x00secret", "alice\x00alice\x00pw", "", "\x00\x00", "a\x00b", "a\x00b\x00c\x00d", "\x00\x00pw"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, token []byte) {
		authz, user, password, err := auth.ParsePlain(token)
		if err != nil {
			if !errors.Is(err, auth.ErrAuthenticationFailed) {
				t.Fatalf("error %v is not ErrAuthenticationFailed", err)
			}
			return
		}
		if user == "" || password == "" {
			t.Fatalf("accepted an empty user or password from %q", token)
		}
		if !bytes.Equal([]byte(authz+"\x00"+user+"\x00"+password), token) {
			t.Fatalf("fields %q %q %q do not make up %q", authz, user, password, token)
		}
	})
}

// FuzzSCRAMServer feeds arbitrary client-first and client-final messages to
// a SCRAM server whose only user has a password the fuzzer cannot know. It
// must never panic and never authenticate: every outcome is an error
// wrapping ErrAuthenticationFailed.
func FuzzSCRAMServer(f *testing.F) {
	f.Add([]byte("n,,n=alice,r=abc"), []byte("c=biws,r=abcXYZ,p=dGVzdA=="))
	f.Add([]byte("y,a=alice,n=alice,r=abc,tokenauth=true"), []byte("c=eSxhPWFsaWNlLA==,r=abc,p="))
	f.Add([]byte("p=tls-unique,,n=alice,r=abc"), []byte("c=,r=,x=1,p=AAAA"))
	f.Add([]byte("n,,m=ext,n=alice,r=abc"), []byte(""))
	f.Add([]byte("n,,n=al=2Cice=3D,r=abc,ext=1"), []byte("c=biws,r=abc,p=====,"))
	f.Add([]byte("n,,n=a=ZZ,r="), []byte(",,,"))
	creds, _ := newCredentials(f)
	if _, err := creds.AddIfAbsent(context.Background(), "alice", "a password the fuzzer cannot guess"); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, first, final []byte) {
		for _, mech := range []string{auth.MechanismSCRAMSHA256, auth.MechanismSCRAMSHA512} {
			s, err := auth.NewServer(mech, creds)
			if err != nil {
				t.Fatal(err)
			}
			_, done, err := s.Step(context.Background(), first)
			if done {
				t.Fatal("done after client-first")
			}
			if err != nil {
				if !errors.Is(err, auth.ErrAuthenticationFailed) {
					t.Fatalf("client-first: %v", err)
				}
				continue
			}
			_, done, err = s.Step(context.Background(), final)
			if done || err == nil || !errors.Is(err, auth.ErrAuthenticationFailed) {
				t.Fatalf("client-final %q after %q: done %v, err %v", final, first, done, err)
			}
		}
	})
}

// FuzzParseClientFirst: whatever parses is the message it came from (gs2
// header then bare), with a user and a printable nonce.
func FuzzParseClientFirst(f *testing.F) {
	for _, seed := range []string{"n,,n=alice,r=abc", "y,a=bob,n=a=2Cb,r=x,tokenauth=true", "p=tls-unique,,n=a,r=b", "n,,m=x,n=a,r=b", "n,,n=a=ZZ,r=b", ",,,", "n,,n=a,r=b,="} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		got, err := auth.ParseClientFirst(msg)
		if err != nil {
			return
		}
		if got.GS2Header+got.Bare != msg || got.User == "" || got.Nonce == "" || strings.ContainsAny(got.Nonce, ", ") {
			t.Fatalf("%q parsed as %+v", msg, got)
		}
	})
}

// FuzzParseClientFinal: whatever parses ends in its proof and starts with
// its channel binding and nonce.
func FuzzParseClientFinal(f *testing.F) {
	for _, seed := range []string{"c=biws,r=abc,p=AAAA", "c=biws,r=abc,x=1,p=", "c=,r=,p=", "c=biws,p=AAAA", ",p=", "c=b,r=a,p=A"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		got, err := auth.ParseClientFinal(msg)
		if err != nil {
			return
		}
		if !strings.HasPrefix(msg, got.WithoutProof+",p=") || !strings.HasPrefix(got.WithoutProof, "c=") || got.Nonce == "" {
			t.Fatalf("%q parsed as %+v", msg, got)
		}
	})
}
