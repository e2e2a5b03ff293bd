package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/labstate"
)

// scratchTest is a driver author's test, in a module of their own: it
// calls the sanity layer as a library on the node the environment names.
const scratchTest = `package mydriver

import (
	"os"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/sanity"
)

func TestSanity(t *testing.T) {
	m, err := manifest.Load(os.Getenv("MANIFEST"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("LAB_KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	sanity.Test(t, sanity.Config{
		Manifest:     m,
		Client:       kubernetes.NewForConfigOrDie(cfg),
		NodeName:     os.Getenv("NODE"),
		RegistrarDir: os.Getenv("REGISTRAR_DIR"),
		CDIDir:       os.Getenv("CDI_DIR"),
		// No way to restart the driver from here: the restart check is
		// not verified, which this author accepts.
		AllowUnverified: true,
	})
}
`

// TestOutsideModule takes the view of a driver author, outside this
// repository: a scratch module that requires the conformance module (with
// only a replace to this checkout, as a pseudo-version would) builds and
// runs sanity.Test against the fake driver of an embedded lab's node; and
// dralab-conformance, installed with go install from the module's folder,
// passes both layers on the lab. Neither reaches dralab's own module.
func TestOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded lab and builds a module of its own: run without -short")
	}
	ctx := context.Background()
	module, err := filepath.Abs("../../drivers/conformance")
	if err != nil {
		t.Fatal(err)
	}
	driverManifest, err := filepath.Abs("../../drivers/fakegpu/driver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l, restConfig := startLab(t, "t-outside")
	m, err := manifest.Load(driverManifest)
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node, err := scratchlab.SanityConfig(ctx, l, kubernetes.NewForConfigOrDie(restConfig), m)
	if err != nil {
		t.Fatal(err)
	}
	// A module cache of the machine's, and go's own resolution: the
	// scratch module names no version of anything but the replace.
	goEnv := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")

	scratch := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(scratch, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/mydriver\n\ngo 1.26.0\n\n"+
		"require github.com/dralab/dralab/drivers/conformance v0.0.0\n\n"+
		"replace github.com/dralab/dralab/drivers/conformance => "+module+"\n")
	write("sanity_test.go", scratchTest)
	goCmd := func(dir string, env []string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
		}
		return string(out)
	}
	goCmd(scratch, goEnv, "mod", "tidy")
	graph := goCmd(scratch, goEnv, "list", "-m", "all")
	if strings.Contains(graph, "k8s.io/kubernetes") || strings.Contains(graph, "github.com/dralab/dralab ") {
		t.Errorf("the scratch module's graph reaches dralab's own module or Kubernetes':\n%s", graph)
	}
	t.Logf("the scratch module's graph: %d modules", strings.Count(graph, "\n"))
	out := goCmd(scratch, append(goEnv,
		"MANIFEST="+driverManifest, "LAB_KUBECONFIG="+l.Kubeconfig(), "NODE="+node.NodeName,
		"REGISTRAR_DIR="+node.RegistrarDir, "CDI_DIR="+node.CDIDir), "test", "-count=1", "-v", "./...")
	for _, check := range []string{"registration", "prepare", "cdi-ids-resolve", "concurrent"} {
		if !strings.Contains(out, "--- PASS: TestSanity/"+check+" ") {
			t.Errorf("sanity check %s did not pass in the scratch module:\n%s", check, out)
		}
	}
	if !strings.Contains(out, "--- SKIP: TestSanity/restart") || !strings.Contains(out, "not verified: no Restart function") {
		t.Errorf("the restart check ran without a Restart, or was skipped without saying it is not verified:\n%s", out)
	}

	installed := installTool(t)
	consent := labConsent(t, l.Kubeconfig())
	commandEnv, err := scratchlab.CommandEnv(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	junit := filepath.Join(t.TempDir(), "junit.xml")
	html := filepath.Join(t.TempDir(), "report.html")
	// The restart check kills the node's driver; the lab starts it again,
	// as a DaemonSet would.
	ls, err := labstate.Dir(st.StateDir).ReadStatus()
	if err != nil {
		t.Fatal(err)
	}
	driver, ok := ls.Process(labstate.RoleDriver, node.NodeName)
	if !ok || !driver.Running {
		t.Fatalf("the lab runs no driver on node %s", node.NodeName)
	}
	tool := exec.CommandContext(ctx, installed,
		"--manifest", driverManifest, "--kubeconfig", l.Kubeconfig(), "--target", consent,
		"--node", node.NodeName, "--registrar-dir", node.RegistrarDir, "--cdi-dir", node.CDIDir,
		"--podresources-socket", labstate.Dir(st.StateDir).Node(node.NodeName).PodResourcesSocket(),
		"--restart-command", fmt.Sprintf("kill -9 %d", driver.PID), "--junit", junit, "--html", html)
	// The manifest's health commands act on the lab through dralab.
	tool.Env = append(os.Environ(), commandEnv...)
	summary, err := tool.CombinedOutput()
	t.Logf("dralab-conformance:\n%s", summary)
	if err != nil {
		t.Fatalf("dralab-conformance: %v", err)
	}
	for _, want := range []string{"PASS sanity/concurrent", "PASS sanity/restart", "PASS cluster/single device", "PASS cluster/partitionable devices", "PASS cluster/podresources", "0 failed"} {
		if !strings.Contains(string(summary), want) {
			t.Errorf("the tool's output lacks %q", want)
		}
	}
	if data, err := os.ReadFile(junit); err != nil || !strings.Contains(string(data), `name="cluster/single device"`) {
		t.Errorf("JUnit %s: %v\n%s", junit, err, data)
	}
	if data, err := os.ReadFile(html); err != nil || !strings.Contains(string(data), `data-case="cluster/single device" data-status="PASS"`) {
		t.Errorf("HTML %s: %v\n%s", html, err, data)
	}
}
