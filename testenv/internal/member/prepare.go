package member

import (
	"fmt"
	"net"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flotilla/flotilla/testenv/internal/pki"
)

// identity is one client certificate the member issues, and the kubeconfig written for it.
type identity struct {
	file       string // pki/<file>.crt|key
	kubeconfig string // kubeconfigs/<kubeconfig>.kubeconfig ("" = none)
	cn         string
	orgs       []string
}

var identities = []identity{
	{file: "admin", cn: "admin", orgs: []string{"system:masters"}},
	{file: "controller-manager", kubeconfig: "controller-manager", cn: "system:kube-controller-manager"},
	{file: "scheduler", kubeconfig: "scheduler", cn: "system:kube-scheduler"},
	// The fake kubelet manages several nodes with one identity, which the Node authorizer
	// would refuse; it is a cluster admin instead.
	{file: "kubelet", kubeconfig: "kubelet", cn: "testenv:fake-kubelet", orgs: []string{"system:masters"}},
	{file: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
}

// Prepare creates the member's directories, certificates and kubeconfigs. It is idempotent:
// if the CA already exists (a member being restarted) nothing is regenerated, so ports,
// certificates and data stay the same across stop/start.
func (c *Config) Prepare() error {
	for _, d := range []string{c.Dir(), c.PKIDir(), c.LogDir(), c.KubeconfigDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if _, err := os.Stat(c.pki("ca.key")); err == nil {
		return nil
	}
	if err := c.writePKI(); err != nil {
		return fmt.Errorf("member %s: certificates: %w", c.Name, err)
	}
	if err := c.writeKubeconfigs(); err != nil {
		return fmt.Errorf("member %s: kubeconfigs: %w", c.Name, err)
	}
	return nil
}

func (c *Config) writePKI() error {
	dir := c.PKIDir()
	ca, caPair, err := pki.NewAuthority(c.Name + "-ca")
	if err != nil {
		return err
	}
	serving, err := ca.Issue(pki.Leaf{
		CommonName: "kube-apiserver",
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPs:    []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback, firstServiceIP(c.ServiceCIDR)},
		Server: true,
	})
	if err != nil {
		return err
	}
	components, err := ca.Issue(pki.Leaf{
		CommonName: "testenv-components",
		DNSNames:   []string{"localhost"},
		IPs:        []net.IP{net.ParseIP("127.0.0.1")},
		Server:     true,
	})
	if err != nil {
		return err
	}
	pairs := map[string]pki.KeyPair{"ca": caPair, "apiserver": serving, "components": components}
	for _, id := range identities {
		kp, err := ca.Issue(pki.Leaf{CommonName: id.cn, Organizations: id.orgs, Client: true})
		if err != nil {
			return err
		}
		pairs[id.file] = kp
	}
	fpCA, fpCAPair, err := pki.NewAuthority(c.Name + "-front-proxy-ca")
	if err != nil {
		return err
	}
	fpClient, err := fpCA.Issue(pki.Leaf{CommonName: "front-proxy-client", Client: true})
	if err != nil {
		return err
	}
	pairs["front-proxy-ca"] = fpCAPair
	pairs["front-proxy-client"] = fpClient
	for name, kp := range pairs {
		if name == "ca" {
			continue // written last: its key's presence marks the PKI complete
		}
		if err := pki.WriteKeyPair(dir, name, kp); err != nil {
			return err
		}
	}
	saPriv, saPub, err := pki.NewServiceAccountKey()
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.pki("sa.key"), saPriv, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(c.pki("sa.pub"), saPub, 0o644); err != nil {
		return err
	}
	if c.Karmada != nil {
		if err := c.writeKarmadaPKI(ca); err != nil {
			return err
		}
	}
	return pki.WriteKeyPair(dir, "ca", caPair)
}

func (c *Config) writeKubeconfigs() error {
	caPEM, err := os.ReadFile(c.pki("ca.crt"))
	if err != nil {
		return err
	}
	for _, id := range identities {
		path := ""
		switch {
		case id.file == "admin":
			path = c.AdminKubeconfig()
		case id.kubeconfig != "":
			path = c.kubeconfig(id.kubeconfig)
		default:
			continue
		}
		certPEM, err := os.ReadFile(c.pki(id.file + ".crt"))
		if err != nil {
			return err
		}
		keyPEM, err := os.ReadFile(c.pki(id.file + ".key"))
		if err != nil {
			return err
		}
		cfg := Kubeconfig(c.Name, c.Server(), caPEM, certPEM, keyPEM)
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			return err
		}
	}
	return nil
}

// Kubeconfig builds a single-context kubeconfig whose cluster, user and context are all
// called name, with certificates embedded so the file stands alone.
func Kubeconfig(name, server string, caPEM, certPEM, keyPEM []byte) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	return cfg
}

// firstServiceIP is the ClusterIP of the `kubernetes` Service (first address of the range).
func firstServiceIP(cidr string) net.IP {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return net.ParseIP("10.96.0.1")
	}
	ip := append(net.IP(nil), n.IP.To4()...)
	if ip == nil {
		ip = append(net.IP(nil), n.IP...)
	}
	ip[len(ip)-1]++
	return ip
}
