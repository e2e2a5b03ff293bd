// Package pki issues the lab's certificates: one CA, the API server's serving
// certificate and a client certificate per component and node. Every key is
// ECDSA P-256 so that a lab comes up in milliseconds, not seconds.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// validity is long enough for a workshop lab that is left running for weeks.
const validity = 365 * 24 * time.Hour

// CA is the lab's certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA creates a self-signed CA.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: commonName}, key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA written by WriteFiles.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certs, err := certutil.CertsFromFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA certificate: %w", err)
	}
	key, err := keyutil.PrivateKeyFromFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("CA key is not a signing key")
	}
	return &CA{Cert: certs[0], Key: signer}, nil
}

// Pair is a PEM-encoded certificate and its key.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Request describes a leaf certificate.
type Request struct {
	CommonName   string
	Organization []string
	// Server certificates name their hosts; client certificates leave both empty.
	DNSNames []string
	IPs      []net.IP
	Client   bool
	Server   bool
}

// Issue signs a new leaf certificate.
func (ca *CA) Issue(req Request) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key for %s: %w", req.CommonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("generating serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: req.Organization},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing certificate for %s: %w", req.CommonName, err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, fmt.Errorf("encoding key for %s: %w", req.CommonName, err)
	}
	return &Pair{CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// CertPEM returns the CA certificate in PEM form.
func (ca *CA) CertPEM() []byte { return encodeCert(ca.Cert.Raw) }

// Write stores the CA as <dir>/<name>.crt and <dir>/<name>.key.
func (ca *CA) Write(dir, name string) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(ca.Key)
	if err != nil {
		return fmt.Errorf("encoding CA key: %w", err)
	}
	return (&Pair{CertPEM: ca.CertPEM(), KeyPEM: keyPEM}).Write(dir, name)
}

// Write stores the pair as <dir>/<name>.crt and <dir>/<name>.key, the key
// readable by its owner only.
func (p *Pair) Write(dir, name string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), p.CertPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), p.KeyPEM, 0o600)
}

// NewServiceAccountKey returns a PEM-encoded key for signing service account tokens.
func NewServiceAccountKey() ([]byte, error) {
	return keyutil.MakeEllipticPrivateKeyPEM()
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der})
}
