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
	t.Setenv("HOME", t.TempDir())
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
		{"no cluster", []string{"--manifest", m}, 2, nil, []string{"no --kubeconfig, no KUBECONFIG and no ~/.kube/config"}},
		{"a cluster without consent", []string{"--manifest", m, "--kubeconfig", kc}, 2, nil, []string{`"ci"`, "DRALAB_TARGET=ci"}},
		// A sanity layer that cannot run is not a pass.
		{"the sanity layer without a node", []string{"--manifest", m, "--kubeconfig", kc, "--target", "ci@https://127.0.0.1:1", "--layer", "sanity"}, 1,
			[]string{"sanity", "FAIL", "not verified: the sanity layer did not run", "--cluster-only", "1 checks: 0 passed, 1 failed, 0 skipped"}, []string{"Target: context \"ci\"", "FAIL sanity"}},
		{"the sanity layer without a node, allowed", []string{"--manifest", m, "--kubeconfig", kc, "--target", "ci@https://127.0.0.1:1", "--layer", "sanity", "--allow-unverified", "--junit", junit, "--html", html}, 0,
			[]string{"SKIP", "WARNING: 1 checks of what the manifest enables were not verified", "1 checks: 0 passed, 0 failed, 1 skipped", "JUnit: " + junit, "Report: " + html}, []string{"SKIP sanity"}},
		{"a node this process cannot reach", []string{"--manifest", m, "--kubeconfig", kc, "--target", "ci@https://127.0.0.1:1", "--layer", "sanity", "--node", "n1", "--registrar-dir", filepath.Join(t.TempDir(), "none")}, 1,
			[]string{"--registrar-dir", "1 failed"}, nil},
		{"a node whose CDI directory this process cannot see", []string{"--manifest", m, "--kubeconfig", kc, "--target", "ci@https://127.0.0.1:1", "--layer", "sanity", "--node", "n1", "--registrar-dir", t.TempDir(), "--cdi-dir", filepath.Join(t.TempDir(), "none")}, 1,
			[]string{"--cdi-dir", "1 failed"}, nil},
		{"a podresources socket without a node", []string{"--manifest", m, "--kubeconfig", kc, "--target", "ci@https://127.0.0.1:1", "--podresources-socket", "/run/none.sock"}, 2, nil, []string{"--podresources-socket is the socket of --node: give --node too"}},
		{"--cluster-only with --layer sanity", []string{"--manifest", m, "--kubeconfig", kc, "--target", "ci@https://127.0.0.1:1", "--layer", "sanity", "--cluster-only"}, 2, nil, []string{"ask for different layers"}},
		{"an unknown layer", []string{"--manifest", m, "--kubeconfig", kc, "--target", "ci@https://127.0.0.1:1", "--layer", "both"}, 2, nil, []string{`layer "both"`}},
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

// Without --kubeconfig and KUBECONFIG the tool reads ~/.kube/config, as
// kubectl does (kind writes there): DRALAB_TARGET alone is then enough, and
// --context picks another context, which consent must name.
func TestKubeconfigLikeKubectl(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", "")
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(kubeconfig(t), filepath.Join(home, ".kube", "config")); err != nil {
		t.Fatal(err)
	}
	const m = "../../../fakegpu/driver.yaml"
	args := []string{"--manifest", m, "--layer", "sanity", "--allow-unverified"}

	t.Setenv("DRALAB_TARGET", "ci@https://127.0.0.1:1")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), `Target: context "ci"`) ||
		!strings.Contains(stderr.String(), filepath.Join(home, ".kube", "config")) {
		t.Errorf("exit code %d, want 0 on context ci of ~/.kube/config\nstdout: %s\nstderr: %s", code, &stdout, &stderr)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), append(args, "--context", "none"), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `no context "none"`) {
		t.Errorf("--context none: exit code %d, want 2 naming the missing context\nstderr: %s", code, &stderr)
	}
}
