package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfig writes a kubeconfig whose current context, ci, points at an
// address nothing answers on: the runs below call no cluster.
func kubeconfig(t *testing.T) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.Contexts["ci"] = &clientcmdapi.Context{Cluster: "c"}
	cfg.CurrentContext = "ci"
	file := filepath.Join(t.TempDir(), "config")
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestRun(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("DRALAB_TARGET", "")
	const m = "../../../fakegpu/driver.yaml"
	kc := kubeconfig(t)
	junit := filepath.Join(t.TempDir(), "junit.xml")
	html := filepath.Join(t.TempDir(), "report.html")
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"no manifest", nil, 2, nil, []string{"--manifest is required"}},
		{"an unknown flag", []string{"--manifests", m}, 2, nil, []string{"flag provided but not defined: -manifests", "Usage:"}},
		{"an argument", []string{"--manifest", m, "extra"}, 2, nil, []string{`unexpected arguments ["extra"]`}},
		{"a manifest that does not parse", []string{"--manifest", "main.go"}, 2, nil, []string{"main.go"}},
		{"no cluster", []string{"--manifest", m}, 2, nil, []string{"set --kubeconfig or KUBECONFIG"}},
		{"a cluster without consent", []string{"--manifest", m, "--kubeconfig", kc}, 2, nil, []string{`"ci"`, "DRALAB_TARGET=ci"}},
		{"the sanity layer without a node", []string{"--manifest", m, "--kubeconfig", kc, "--target", "ci", "--layer", "sanity", "--junit", junit, "--html", html}, 0,
			[]string{"sanity", "SKIP", "1 checks: 0 passed, 0 failed, 1 skipped", "JUnit: " + junit, "Report: " + html}, []string{"Target: context \"ci\"", "SKIP sanity"}},
		{"a node this process cannot reach", []string{"--manifest", m, "--kubeconfig", kc, "--target", "ci", "--layer", "sanity", "--node", "n1", "--registrar-dir", filepath.Join(t.TempDir(), "none")}, 0,
			[]string{"--registrar-dir", "1 skipped"}, nil},
		{"an unknown layer", []string{"--manifest", m, "--kubeconfig", kc, "--target", "ci", "--layer", "both"}, 2, nil, []string{`layer "both"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), c.args, &stdout, &stderr)
			if code != c.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, c.code, &stdout, &stderr)
			}
			for _, want := range c.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, &stdout)
				}
			}
			for _, want := range c.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, &stderr)
				}
			}
		})
	}
	if data, err := os.ReadFile(junit); err != nil || !strings.Contains(string(data), "<skipped") {
		t.Errorf("JUnit %s: %s, %v", junit, data, err)
	}
	if data, err := os.ReadFile(html); err != nil || !strings.Contains(string(data), `data-case="sanity" data-status="SKIP"`) {
		t.Errorf("HTML %s: %s, %v", html, data, err)
	}
}
