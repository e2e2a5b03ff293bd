package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/component-base/version"
	kubeadmv1beta4 "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta4"
	"k8s.io/kubernetes/cmd/kubeadm/app/constants"

	"github.com/dralab/dralab/lab/internal/kind/nodeimage"
)

// runAs is set in the environment of the test binary run again as kube.
const runAs = "KUBE_TEST_RUN_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAs) != "" {
		main()
		return
	}
	os.Exit(m.Run())
}

// run runs the test binary as kube under name (a link to it), with args.
func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, args...)
	cmd.Env = append(os.Environ(), runAs+"=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Each command kube answers to is that component, of the Kubernetes kube
// is built from, whether kube runs as a link of its name or is given the name
// first; an unknown name is one line naming the commands.
func TestEveryCommandIsItsComponent(t *testing.T) {
	versions := map[string][]string{
		"kube-apiserver":          {"--version"},
		"kube-controller-manager": {"--version"},
		"kube-scheduler":          {"--version"},
		"kube-proxy":              {"--version"},
		"kubelet":                 {"--version"},
		"kubeadm":                 {"version", "-o", "short"},
		"kubectl":                 {"version", "--client"},
		"etcd":                    {"--version"},
	}
	if len(versions) != len(Names()) {
		t.Errorf("kube answers to %v; the test knows %d commands", Names(), len(versions))
	}
	for _, name := range Names() {
		args, ok := versions[name]
		if !ok {
			t.Errorf("no version check for %s", name)
			continue
		}
		// The version the build stamped (build.LDFlags: v1.37.2 in the
		// node image; go test stamps none).
		want := version.Get().GitVersion
		switch name {
		case "kubectl":
			want = "Client Version: " + want
		case "kubeadm":
		case "etcd":
			want = "etcd Version: 3."
		default:
			want = "Kubernetes " + want
		}
		out, err := run(t, name, args...)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("%s %v: %v\n%s\nwant %q", name, args, err, out, want)
		}
		out, err = run(t, "kube", append([]string{name}, args...)...)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("kube %s %v: %v\n%s\nwant %q", name, args, err, out, want)
		}
		// Its help is its own: the usage line names it.
		if out, _ := run(t, name, "--help"); !strings.Contains(out, "  "+name+" [") {
			t.Errorf("%s --help is not %s's:\n%s", name, name, out)
		}
	}
	out, err := run(t, "kube", "kube-nothing")
	if err == nil || !strings.Contains(out, "run as one of [etcd kube-apiserver") || strings.Count(out, "\n") != 1 {
		t.Errorf("an unknown name: %v\n%s", err, out)
	}
}

// The node image names the control plane's images as this kubeadm does:
// the etcd and pause tags kubeadm pulls are the ones the node image
// carries, so kubeadm finds them without a registry.
func TestNodeImageNamesKubeadmsImages(t *testing.T) {
	if nodeimage.EtcdImageTag != constants.DefaultEtcdVersion || nodeimage.PauseImageTag != constants.PauseVersion ||
		nodeimage.Registry != kubeadmv1beta4.DefaultImageRepository {
		t.Errorf("the node image carries %s/etcd:%s and pause:%s; kubeadm asks for %s/etcd:%s and pause:%s",
			nodeimage.Registry, nodeimage.EtcdImageTag, nodeimage.PauseImageTag, kubeadmv1beta4.DefaultImageRepository, constants.DefaultEtcdVersion, constants.PauseVersion)
	}
}
