package target

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig whose current context is ctx, at
// server, to file.
func writeKubeconfig(t *testing.T, file, ctx, server string) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	cfg.Contexts[ctx] = &clientcmdapi.Context{Cluster: "c"}
	cfg.Contexts["other"] = &clientcmdapi.Context{Cluster: "c"}
	cfg.CurrentContext = ctx
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		t.Fatal(err)
	}
}

// labServer is the API server of the one lab these tests know.
const labServer = "https://127.0.0.1:40001"

// isLab is a Request.Lab that knows one lab: its kubeconfig file at its
// server.
func isLab(kubeconfig string) func(string, string) (string, bool) {
	return func(file, server string) (string, bool) {
		if file != kubeconfig || server != labServer {
			return "", false
		}
		return filepath.Dir(file), true
	}
}

func TestResolve(t *testing.T) {
	foreign := filepath.Join(t.TempDir(), "config")
	writeKubeconfig(t, foreign, "prod", "https://10.0.0.1:6443")
	labKubeconfig := filepath.Join(t.TempDir(), "mylab", "kubeconfig")
	writeKubeconfig(t, labKubeconfig, "dralab-mylab", labServer)

	t.Run("no kubeconfig: a fresh lab", func(t *testing.T) {
		got, err := Resolve(Request{})
		if err != nil || got != nil {
			t.Fatalf("got %v, %v; want a fresh lab (nil)", got, err)
		}
		if s := got.String(); !strings.Contains(s, "fresh embedded lab") {
			t.Errorf("String() = %q", s)
		}
	})
	t.Run("consent without a kubeconfig", func(t *testing.T) {
		_, err := Resolve(Request{Consent: "prod"})
		if err == nil || !strings.Contains(err.Error(), "set KUBECONFIG") {
			t.Fatalf("got %v, want an error asking for the kubeconfig", err)
		}
	})
	t.Run("KUBECONFIG alone is not consent", func(t *testing.T) {
		_, err := Resolve(Request{Kubeconfig: foreign})
		if !errors.Is(err, ErrNoConsent) {
			t.Fatalf("got %v, want ErrNoConsent", err)
		}
		for _, want := range []string{`"prod"`, "https://10.0.0.1:6443", "DRALAB_TARGET=prod", "unset KUBECONFIG"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal %q does not say %s", err, want)
			}
		}
	})
	const prod = "prod@https://10.0.0.1:6443"
	t.Run("consent names the context and its server", func(t *testing.T) {
		got, err := Resolve(Request{Kubeconfig: foreign, Consent: prod})
		if err != nil {
			t.Fatal(err)
		}
		if got.Context != "prod" || got.Server != "https://10.0.0.1:6443" || got.Kubeconfig != foreign || got.LabDir != "" {
			t.Errorf("got %+v", got)
		}
		for _, want := range []string{`"prod"`, "https://10.0.0.1:6443", foreign, EnvConsent} {
			if !strings.Contains(got.String(), want) {
				t.Errorf("String() = %q does not say %s", got, want)
			}
		}
	})
	t.Run("consent to another context", func(t *testing.T) {
		_, err := Resolve(Request{Kubeconfig: foreign, Consent: "staging@https://10.0.0.1:6443"})
		if !errors.Is(err, ErrNoConsent) || !strings.Contains(err.Error(), "staging") || !strings.Contains(err.Error(), `"prod"`) {
			t.Fatalf("got %v, want ErrNoConsent naming both contexts", err)
		}
	})
	t.Run("a bare context is not consent", func(t *testing.T) {
		// DRALAB_TARGET=prod in a shell profile would consent to any
		// cluster whose context is called prod.
		_, err := Resolve(Request{Kubeconfig: foreign, Consent: "prod"})
		if !errors.Is(err, ErrNoConsent) || !strings.Contains(err.Error(), "DRALAB_TARGET="+prod) {
			t.Fatalf("got %v, want ErrNoConsent giving the consent with the server", err)
		}
	})
	t.Run("consent to the context at another server", func(t *testing.T) {
		_, err := Resolve(Request{Kubeconfig: foreign, Consent: "prod@https://10.9.9.9:6443"})
		if !errors.Is(err, ErrNoConsent) || !strings.Contains(err.Error(), "https://10.9.9.9:6443") || !strings.Contains(err.Error(), "https://10.0.0.1:6443") {
			t.Fatalf("got %v, want ErrNoConsent naming both servers", err)
		}
	})
	t.Run("--context is the context consented to", func(t *testing.T) {
		if _, err := Resolve(Request{Kubeconfig: foreign, Context: "other", Consent: prod}); !errors.Is(err, ErrNoConsent) {
			t.Fatalf("consent to prod, run on other: got %v, want ErrNoConsent", err)
		}
		got, err := Resolve(Request{Kubeconfig: foreign, Context: "other", Consent: "other@https://10.0.0.1:6443"})
		if err != nil || got.Context != "other" {
			t.Fatalf("got %v, %v", got, err)
		}
	})
	t.Run("a lab's own kubeconfig", func(t *testing.T) {
		got, err := Resolve(Request{Kubeconfig: labKubeconfig, Lab: isLab(labKubeconfig)})
		if err != nil {
			t.Fatal(err)
		}
		if got.LabDir != filepath.Dir(labKubeconfig) || got.Server != labServer {
			t.Errorf("got %+v, want the lab in %s", got, filepath.Dir(labKubeconfig))
		}
		if !strings.Contains(got.String(), "the dralab lab in "+filepath.Dir(labKubeconfig)) {
			t.Errorf("String() = %q", got)
		}
	})
	t.Run("without a Lab, a lab's kubeconfig needs consent too", func(t *testing.T) {
		if _, err := Resolve(Request{Kubeconfig: labKubeconfig}); !errors.Is(err, ErrNoConsent) {
			t.Fatalf("got %v, want ErrNoConsent", err)
		}
	})
	t.Run("a Lab that does not know the kubeconfig", func(t *testing.T) {
		if _, err := Resolve(Request{Kubeconfig: foreign, Lab: isLab(labKubeconfig)}); !errors.Is(err, ErrNoConsent) {
			t.Fatalf("got %v, want ErrNoConsent", err)
		}
	})
	t.Run("a list of kubeconfigs is merged as kubectl merges it", func(t *testing.T) {
		list := foreign + string(filepath.ListSeparator) + labKubeconfig
		got, err := Resolve(Request{Kubeconfig: list, Consent: prod})
		if err != nil {
			t.Fatal(err)
		}
		// The first file sets the current context and cluster c.
		if got.Context != "prod" || got.Server != "https://10.0.0.1:6443" || len(got.Files) != 2 || got.Kubeconfig != list {
			t.Errorf("got %+v, want prod of the first file, both files", got)
		}
		// A lab's kubeconfig in the list is still a lab's.
		got, err = Resolve(Request{Kubeconfig: labKubeconfig + string(filepath.ListSeparator) + foreign, Lab: isLab(labKubeconfig)})
		if err != nil || got.LabDir != filepath.Dir(labKubeconfig) {
			t.Fatalf("got %+v, %v; want the lab in %s", got, err, filepath.Dir(labKubeconfig))
		}
		rest, err := got.ClientConfig().ClientConfig()
		if err != nil || rest.Host != labServer {
			t.Errorf("ClientConfig: %v, %v; want the lab's server", rest, err)
		}
	})
	t.Run("a missing kubeconfig", func(t *testing.T) {
		if _, err := Resolve(Request{Kubeconfig: filepath.Join(t.TempDir(), "none")}); err == nil {
			t.Fatal("no error")
		}
	})
}

// DefaultKubeconfig finds the kubeconfig where kubectl does.
func TestDefaultKubeconfig(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", "")
	if got := DefaultKubeconfig(); got != "" {
		t.Errorf("no KUBECONFIG, no ~/.kube/config: got %q, want none", got)
	}
	file := filepath.Join(home, ".kube", "config")
	writeKubeconfig(t, file, "kind-kind", "https://127.0.0.1:6443")
	if got := DefaultKubeconfig(); got != file {
		t.Errorf("got %q, want %s", got, file)
	}
	t.Setenv("KUBECONFIG", "/a:/b")
	if got := DefaultKubeconfig(); got != "/a:/b" {
		t.Errorf("got %q, want $KUBECONFIG", got)
	}
}
