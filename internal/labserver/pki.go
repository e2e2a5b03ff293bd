package labserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/controlplane/options"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/internal/pki"
)

// identity is a client of the API server: a certificate subject and the
// kubeconfig that carries it.
type identity struct {
	kubeconfig   string
	commonName   string
	organization []string
}

// writePKI issues the lab's CA and certificates and writes a kubeconfig for
// the administrator, each control-plane component and each node. Every
// identity gets its own certificate so that the API server's audit and the
// Node authorizer see who is who.
func writePKI(dir labstate.Dir, server, lab string, nodes []string) (options.PKIFiles, error) {
	pkiDir := dir.PKI()
	files := options.PKIFiles{
		CACert:            filepath.Join(pkiDir, "ca.crt"),
		CAKey:             filepath.Join(pkiDir, "ca.key"),
		APIServerCert:     filepath.Join(pkiDir, "apiserver.crt"),
		APIServerKey:      filepath.Join(pkiDir, "apiserver.key"),
		KubeletClientCert: filepath.Join(pkiDir, "apiserver-kubelet-client.crt"),
		KubeletClientKey:  filepath.Join(pkiDir, "apiserver-kubelet-client.key"),
		ServiceAccountKey: filepath.Join(pkiDir, "sa.key"),
	}
	// A lab resumed on its state keeps its CA and service-account key:
	// clients holding the old kubeconfig, and tokens already issued, stay
	// valid. Everything the CA signs is issued anew.
	ca, err := pki.LoadCA(files.CACert, files.CAKey)
	if errors.Is(err, os.ErrNotExist) {
		ca, err = pki.NewCA("dralab-ca")
		if err == nil {
			err = ca.Write(pkiDir, "ca")
		}
	}
	if err != nil {
		return files, err
	}
	serving, err := ca.Issue(pki.Request{
		CommonName: "kube-apiserver",
		Server:     true,
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:        []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
	})
	if err != nil {
		return files, err
	}
	if err := serving.Write(pkiDir, "apiserver"); err != nil {
		return files, err
	}
	// The API server's client certificate for kubectl logs/exec on kubelets.
	kubeletClient, err := ca.Issue(pki.Request{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return files, err
	}
	if err := kubeletClient.Write(pkiDir, "apiserver-kubelet-client"); err != nil {
		return files, err
	}
	if _, err := os.Stat(files.ServiceAccountKey); errors.Is(err, os.ErrNotExist) {
		saKey, err := pki.NewServiceAccountKey()
		if err != nil {
			return files, err
		}
		if err := os.WriteFile(files.ServiceAccountKey, saKey, 0o600); err != nil {
			return files, err
		}
	}

	ids := []identity{
		{dir.Kubeconfig(), "dralab-admin", []string{"system:masters"}},
		{dir.ComponentKubeconfig("kube-scheduler"), "system:kube-scheduler", nil},
		{dir.ComponentKubeconfig("kube-controller-manager"), "system:kube-controller-manager", nil},
	}
	for _, n := range nodes {
		ids = append(ids,
			identity{dir.Node(n).Kubeconfig(), "system:node:" + n, []string{"system:nodes"}})
		// A driver's token is issued once its node has registered.
		for _, role := range nodedrivers.Roles() {
			d := dir.Node(n).Driver(role)
			driver := &clientcmdapi.AuthInfo{TokenFile: d.Token}
			if err := writeKubeconfig(d.Kubeconfig, labstate.ContextName(lab), server, ca.CertPEM(), driver); err != nil {
				return files, err
			}
		}
	}
	for _, id := range ids {
		pair, err := ca.Issue(pki.Request{CommonName: id.commonName, Organization: id.organization, Client: true})
		if err != nil {
			return files, err
		}
		user := &clientcmdapi.AuthInfo{ClientCertificateData: pair.CertPEM, ClientKeyData: pair.KeyPEM}
		if err := writeKubeconfig(id.kubeconfig, labstate.ContextName(lab), server, ca.CertPEM(), user); err != nil {
			return files, err
		}
	}
	return files, nil
}

// writeKubeconfig writes a kubeconfig for user, readable by its owner only.
// Its context, cluster and user are all called name.
func writeKubeconfig(path, name, server string, caPEM []byte, user *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = user
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}
