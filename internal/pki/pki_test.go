package pki

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"path/filepath"
	"testing"
)

func TestIssueVerifiesAgainstCA(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.Write(dir, "ca"); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := loaded.Issue(Request{CommonName: "kube-apiserver", Server: true, IPs: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pair.CertPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate does not verify: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("a server-only certificate verifies as a client certificate")
	}
	client, err := ca.Issue(Request{CommonName: "system:node:a", Organization: []string{"system:nodes"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	block, _ = pem.Decode(client.CertPEM)
	cc, _ := x509.ParseCertificate(block.Bytes)
	if cc.Subject.CommonName != "system:node:a" || len(cc.Subject.Organization) != 1 || cc.Subject.Organization[0] != "system:nodes" {
		t.Errorf("client subject = %v", cc.Subject)
	}
}
