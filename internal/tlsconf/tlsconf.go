// Package tlsconf builds the TLS configurations of Quire's listeners from
// PEM files: a certificate and key reloaded when the files change (a renewed
// certificate needs no restart), and optionally a client CA, which makes the
// listener require and verify client certificates (mutual TLS); and those of
// Quire's own clients of its internal listeners (brokers to bookies, every
// process to etcd, ISR followers to leaders): the CA they trust and the
// certificate they present, reloaded the same way. It also makes a local CA
// and certificates for a test cluster (`quire certs`).
package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Files names a listener's PEM files. Cert and Key are required together;
// ClientCA, when set, turns on mutual TLS.
type Files struct {
	Cert, Key string
	ClientCA  string
}

// Enabled reports whether TLS is configured.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" }

// Server returns a server configuration that reads the certificate and key
// now (failing if they are unusable) and again whenever either file's
// modification time changes, at most once per handshake.
func Server(f Files) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("tls: a certificate needs its key and a key its certificate")
	}
	r := &reloader{cert: f.Cert, key: f.Key}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.load() }}
	if f.ClientCA != "" {
		pool, err := Pool(f.ClientCA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientFiles names what a client of a TLS listener reads: CA, the
// certificates it trusts (empty: the system's roots), and for mutual TLS its
// own certificate and key, required together.
type ClientFiles struct {
	CA        string
	Cert, Key string
}

// Enabled reports whether the client speaks TLS.
func (f ClientFiles) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Client returns a client configuration trusting f.CA and presenting f.Cert
// when the server asks for a certificate; the certificate is read now
// (failing if it is unusable) and again whenever its files change, so a
// renewed client certificate needs no restart either. The server's name is
// checked against the address dialled (crypto/tls does when ServerName is
// empty and the dialler sets it, as tls.Dialer does).
func Client(f ClientFiles) (*tls.Config, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("tls: a client certificate needs its key and a key its certificate")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := Pool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" {
		r := &reloader{cert: f.Cert, key: f.Key}
		if _, err := r.load(); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.load() }
	}
	return cfg, nil
}

// Pool reads a PEM file of CA certificates.
func Pool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls: no certificate in %s", file)
	}
	return pool, nil
}

// reloader keeps a certificate and reloads it when its files change.
type reloader struct {
	cert, key string
	mu        sync.Mutex
	loaded    *tls.Certificate
	stamp     [2]time.Time
}

func (r *reloader) load() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var stamp [2]time.Time
	for i, f := range []string{r.cert, r.key} {
		st, err := os.Stat(f)
		if err != nil {
			if r.loaded != nil {
				return r.loaded, nil // keep serving the last good one
			}
			return nil, fmt.Errorf("tls: %w", err)
		}
		stamp[i] = st.ModTime()
	}
	if r.loaded != nil && stamp == r.stamp {
		return r.loaded, nil
	}
	c, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		if r.loaded != nil {
			return r.loaded, nil // a half-written renewal: keep the old one
		}
		return nil, fmt.Errorf("tls: load %s and %s: %w", r.cert, r.key, err)
	}
	r.loaded, r.stamp = &c, stamp
	return r.loaded, nil
}

// MakeTestPKI writes a CA (ca.pem, ca-key.pem), a server certificate for
// hosts (server.pem, server-key.pem: IP addresses and DNS names) and a client
// certificate for the principal clientCN (client.pem, client-key.pem) into
// dir, valid for validFor. The server certificate is also valid as a client
// certificate (CN=quire): a node's identity towards the others (etcd peers,
// brokers to bookies, ISR followers to leaders). For test clusters: keys are
// ECDSA P-256, key files 0600.
func MakeTestPKI(dir string, hosts []string, clientCN string, validFor time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "quire test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	leaf := func(name, cn string, usage []x509.ExtKeyUsage, hosts []string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		return writePair(dir, name, der, key)
	}
	if err := leaf("server", "quire", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, hosts); err != nil {
		return err
	}
	return leaf("client", clientCN, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil)
}

// ExpiredTestClientCert signs, with the CA that MakeTestPKI wrote into dir,
// a client certificate for cn that expired an hour ago: what negative tests
// of mutual TLS present.
func ExpiredTestClientCert(dir, cn string) (tls.Certificate, error) {
	ca, err := tls.LoadX509KeyPair(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return tls.Certificate{}, err
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}
