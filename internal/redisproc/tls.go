package redisproc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLS makes a server listen with TLS only: --port 0 (no plain port) and
// --tls-port on the process's port, with the given PEM files. Clients are
// not asked for certificates (--tls-auth-clients no).
type TLS struct {
	CertFile string // the server's certificate
	KeyFile  string // its private key
	CAFile   string // the CA that signed it
	// Client is how [Process.Do] and the readiness check connect: it must
	// trust CAFile (RootCAs). [NewTLS] fills it in.
	Client *tls.Config
}

// tlsValidity is how long the certificates of [NewTLS] are valid.
const tlsValidity = 24 * time.Hour

// NewTLS makes a self-signed CA and a server certificate it signs, valid
// for 127.0.0.1, ::1 and localhost for a day, writes them as PEM files
// (ca.pem, server.pem, server-key.pem) into dir, and returns them with a
// client configuration that trusts the CA. It is meant for tests: the keys
// are written unencrypted.
func NewTLS(dir string) (*TLS, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redlock test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(tlsValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "redlock test server"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(tlsValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	t := &TLS{
		CertFile: filepath.Join(dir, "server.pem"),
		KeyFile:  filepath.Join(dir, "server-key.pem"),
		CAFile:   filepath.Join(dir, "ca.pem"),
	}
	if err := errors.Join(
		writePEM(t.CAFile, "CERTIFICATE", caDER),
		writePEM(t.CertFile, "CERTIFICATE", der),
		writePEM(t.KeyFile, "PRIVATE KEY", keyDER),
	); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	t.Client = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
