package kind

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// TestPodmanConfKeepsTheHostsChain: the lab's containers.conf is podman's
// chain of files merged as podman merges them (the administrator's keys
// over the distribution's, drop-ins in name order, a table key by key), the
// lab's settings last: what the host's administrator set (cgroup manager,
// network backend, another runtime's path) stays in force, where
// CONTAINERS_CONF naming the lab's settings alone would drop it.
func TestPodmanConfKeepsTheHostsChain(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		f := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("usr/share/containers/containers.conf", "[containers]\nlog_size_max = 1\npids_limit = 2048\n[engine]\ncgroup_manager = \"systemd\"\nevents_logger = \"journald\"\n")
	write("etc/containers/containers.conf", "[engine]\ncgroup_manager = \"cgroupfs\"\n[network]\nnetwork_backend = \"cni\"\n")
	write("etc/containers/containers.conf.d/20-b.conf", "[engine]\nevents_logger = \"file\"\n")
	write("etc/containers/containers.conf.d/10-a.conf", "[engine]\nevents_logger = \"none\"\n[engine.runtimes]\nrunc = [\"/opt/runc\"]\n")
	write("etc/containers/containers.conf.d/notes.txt", "not a configuration")
	write("home/.config/containers/containers.conf", "[containers]\npids_limit = 100\n")

	chain, err := podmanChain(root, false, filepath.Join(root, "home/.config"))
	if err != nil {
		t.Fatal(err)
	}
	wantChain := []string{"usr/share/containers/containers.conf", "etc/containers/containers.conf", "etc/containers/containers.conf.d/10-a.conf", "etc/containers/containers.conf.d/20-b.conf"}
	for i := range wantChain {
		wantChain[i] = filepath.Join(root, wantChain[i])
	}
	if !slices.Equal(chain, wantChain) {
		t.Errorf("root's chain %v, want %v", chain, wantChain)
	}
	rootless, err := podmanChain(root, true, filepath.Join(root, "home/.config"))
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(wantChain), filepath.Join(root, "home/.config/containers/containers.conf")); !slices.Equal(rootless, want) {
		t.Errorf("a user's chain %v, want %v", rootless, want)
	}

	settings, err := Host{NoSysResource: true, HybridCgroups: true}.podmanSettings("crun", true)
	if err != nil {
		t.Fatal(err)
	}
	data, err := podmanConf(chain, settings)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Containers struct {
			LogSizeMax     int      `toml:"log_size_max"`
			PidsLimit      int      `toml:"pids_limit"`
			DefaultUlimits []string `toml:"default_ulimits"`
		}
		Engine struct {
			CgroupManager string              `toml:"cgroup_manager"`
			EventsLogger  string              `toml:"events_logger"`
			Runtime       string              `toml:"runtime"`
			Runtimes      map[string][]string `toml:"runtimes"`
		}
		Network struct {
			NetworkBackend string `toml:"network_backend"`
		}
	}
	if _, err := toml.Decode(string(data), &got); err != nil {
		t.Fatalf("the lab's containers.conf does not decode: %v\n%s", err, data)
	}
	c, e := got.Containers, got.Engine
	if c.LogSizeMax != 1 || c.PidsLimit != 2048 || e.CgroupManager != "cgroupfs" || e.EventsLogger != "file" || got.Network.NetworkBackend != "cni" || !slices.Equal(e.Runtimes["runc"], []string{"/opt/runc"}) {
		t.Errorf("the host's settings are not kept as podman merges them:\n%s", data)
	}
	if !slices.Equal(c.DefaultUlimits, []string{"nofile=20000:20000", "nproc=4096:4096"}) || e.Runtime != "runc" {
		t.Errorf("the lab's settings are not over the host's (ulimits %v, runtime %q):\n%s", c.DefaultUlimits, e.Runtime, data)
	}
	for _, f := range chain {
		if !strings.Contains(string(data), f) {
			t.Errorf("the lab's containers.conf does not say it holds %s", f)
		}
	}

	// A file of the chain that is not TOML is named.
	write("etc/containers/containers.conf.d/30-bad.conf", "[engine\n")
	chain, _ = podmanChain(root, false, "")
	if _, err := podmanConf(chain, settings); err == nil || !strings.Contains(err.Error(), "30-bad.conf") {
		t.Errorf("a broken file of the chain: %v, want an error naming it", err)
	}
}

// TestPodmanRuntimeForTheHost: crun, podman's first choice, refuses hosts
// with hybrid cgroups; there the lab's podman runs runc, and where runc is
// not installed, lab:up says so before any node is made. Elsewhere podman's
// runtime is the host's, and a host that lacks nothing needs no settings.
func TestPodmanRuntimeForTheHost(t *testing.T) {
	hybrid := Host{CgroupV1: true, HybridCgroups: true}
	s, err := hybrid.podmanSettings("crun", true)
	if err != nil || s["engine"].(map[string]any)["runtime"] != "runc" {
		t.Errorf("crun on a hybrid host with runc installed: %v, %v; want runtime runc", s, err)
	}
	if _, err := hybrid.podmanSettings("crun", false); !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), "apt-get install runc") {
		t.Errorf("crun on a hybrid host without runc: %v, want %v saying to install runc", err, ErrNoRuntime)
	}
	for _, c := range []struct {
		host    Host
		runtime string
	}{{hybrid, "runc"}, {Host{}, "crun"}, {Host{CgroupV1: true}, "crun"}} {
		if s, err := c.host.podmanSettings(c.runtime, false); s != nil || err != nil {
			t.Errorf("%s on %+v: %v, %v; want nothing", c.runtime, c.host, s, err)
		}
	}

	// A user's CONTAINERS_CONF is theirs: the lab writes none, and an
	// earlier lab's file does not come back into force.
	dir := t.TempDir()
	t.Setenv(envContainersConf, "/home/me/containers.conf")
	if f, err := hybrid.writePodmanConf(context.Background(), dir); f != "" || err != nil {
		t.Errorf("with the user's CONTAINERS_CONF: %q, %v", f, err)
	}
	if err := os.WriteFile(filepath.Join(dir, podmanConfFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := usePodmanConf(dir); err != nil || os.Getenv(envContainersConf) != "/home/me/containers.conf" {
		t.Errorf("usePodmanConf replaced the user's CONTAINERS_CONF: %q, %v", os.Getenv(envContainersConf), err)
	}
	t.Setenv(envContainersConf, "")
	os.Unsetenv(envContainersConf)
	if err := usePodmanConf(dir); err != nil || os.Getenv(envContainersConf) != filepath.Join(dir, podmanConfFile) {
		t.Errorf("usePodmanConf: CONTAINERS_CONF=%q, %v; want the lab's", os.Getenv(envContainersConf), err)
	}
}
