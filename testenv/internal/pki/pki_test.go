package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"
)

func TestServingCertVerifiesForEveryName(t *testing.T) {
	ca, caPair, err := NewAuthority("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(Leaf{CommonName: "kube-apiserver", DNSNames: []string{"localhost", "kubernetes.default.svc"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM); err != nil {
		t.Fatalf("key pair does not match: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPair.CertPEM)
	block, _ := pem.Decode(kp.CertPEM)
	cert, _ := x509.ParseCertificate(block.Bytes)
	for _, name := range []string{"localhost", "kubernetes.default.svc", "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: pool}); err == nil {
		t.Error("verified for a name not in the certificate")
	}
}

func TestClientCertCarriesGroups(t *testing.T) {
	ca, _, err := NewAuthority("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(Leaf{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(kp.CertPEM)
	cert, _ := x509.ParseCertificate(block.Bytes)
	if cert.Subject.CommonName != "admin" || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:masters" {
		t.Errorf("subject %v", cert.Subject)
	}
	if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("ext key usage %v", cert.ExtKeyUsage)
	}
}
