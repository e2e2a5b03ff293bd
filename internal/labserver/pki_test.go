package labserver

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/internal/labstate"
)

// TestKubeconfigsOfTwoLabsMerge: the administrator kubeconfigs of two labs,
// merged as kubectl merges KUBECONFIG=a:b, keep both labs: each has its
// own context, cluster (with its server and CA) and user, named after the
// lab, and neither file's entries shadow the other's.
func TestKubeconfigsOfTwoLabsMerge(t *testing.T) {
	labs := []struct{ name, server string }{{"dralab", "https://127.0.0.1:20001"}, {"workshop", "https://127.0.0.1:20002"}}
	var files []string
	cas := map[string][]byte{}
	for _, l := range labs {
		dir := labstate.Dir(filepath.Join(t.TempDir(), l.name))
		if err := os.MkdirAll(string(dir), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := writePKI(dir, l.server, l.name, []string{"n1"}); err != nil {
			t.Fatal(err)
		}
		files = append(files, dir.Kubeconfig())
		own, err := clientcmd.LoadFromFile(dir.Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		if want := "dralab-" + l.name; own.CurrentContext != want {
			t.Errorf("lab %s: current context %q, want %q", l.name, own.CurrentContext, want)
		}
		cas[l.name] = own.Clusters[own.CurrentContext].CertificateAuthorityData
	}
	merged, err := (&clientcmd.ClientConfigLoadingRules{Precedence: files}).Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range labs {
		name := labstate.ContextName(l.name)
		ctx, ok := merged.Contexts[name]
		if !ok {
			t.Errorf("the merged kubeconfig has no context %s (contexts: %v)", name, keys(merged.Contexts))
			continue
		}
		cluster, user := merged.Clusters[ctx.Cluster], merged.AuthInfos[ctx.AuthInfo]
		if cluster == nil || cluster.Server != l.server || !bytes.Equal(cluster.CertificateAuthorityData, cas[l.name]) || user == nil || len(user.ClientCertificateData) == 0 {
			t.Errorf("context %s of the merged kubeconfig: cluster %+v, user %v; want server %s with lab %s's CA and a client certificate", name, cluster, user != nil, l.server, l.name)
		}
	}
}

func keys[V any](m map[string]V) string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	return strings.Join(s, ", ")
}
