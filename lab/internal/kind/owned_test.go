package kind

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakePodman is a podman whose networks are files in a folder: inspect
// answers for those that exist (with dns_enabled from the file), ps lists
// the containers written in it, rm removes it, and its network backend is
// CNI.
const fakePodman = `net="$NETS/$3"
case "$1 $2" in
"network inspect") [ -f "$net" ] || exit 125; [ "$4" = --format ] && cat "$net"; exit 0;;
"network rm") rm "$net";;
"ps -aq") cat "$NETS/$(echo $4 | cut -d= -f2).containers" 2>/dev/null; exit 0;;
"info --format") echo cni;;
esac`

// hostWithDNSName is a host whose podman has the dnsname plugin and that
// has no /lib/modules; the state root for its labs.
func hostWithDNSName(t *testing.T) (root string) {
	plugins := t.TempDir()
	cniPluginDirs = []string{plugins}
	if err := os.WriteFile(filepath.Join(plugins, "dnsname"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	libModules = filepath.Join(t.TempDir(), "modules")
	return t.TempDir()
}

func fakeEngine(t *testing.T) (nets string) {
	nets = t.TempDir()
	engineCommands(t, map[string]string{"podman": fakePodman, "cut": `/usr/bin/cut "$@"`, "cat": `/bin/cat "$@"`, "rm": `/bin/rm "$@"`})
	t.Setenv("NETS", nets)
	t.Setenv("KIND_EXPERIMENTAL_PODMAN_NETWORK", "")
	dirs, modules, limit := cniPluginDirs, libModules, inotifyLimit
	t.Cleanup(func() { cniPluginDirs, libModules, inotifyLimit = dirs, modules, limit })
	inotifyLimit = filepath.Join(t.TempDir(), "max_user_instances")
	if err := os.WriteFile(inotifyLimit, []byte("100000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return nets
}

// A host without /lib/modules gets an empty one for its kind nodes, and a
// missing network is kind's to create: both are recorded in the state
// root, and removed by the last lab:down that finds nothing using them —
// never a folder or network the host had, nor one still in use.
func TestHostThingsTheLabCreatedAreRemoved(t *testing.T) {
	ctx := context.Background()
	nets := fakeEngine(t)
	root := hostWithDNSName(t)

	rec, err := prepareHost(ctx, "podman", root, 3)
	if err != nil || rec.Network != "kind" || !rec.LibModules {
		t.Fatalf("prepareHost on a bare host: %+v, %v; want the network and /lib/modules recorded", rec, err)
	}
	if st, err := os.Stat(libModules); err != nil || !st.IsDir() {
		t.Fatalf("/lib/modules not made: %v", err)
	}
	// kind creates the network; a second lab finds it and the folder, and
	// records nothing new.
	if err := os.WriteFile(filepath.Join(nets, "kind"), []byte("true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if rec, err = prepareHost(ctx, "podman", root, 3); err != nil || rec.Network != "kind" || !rec.LibModules {
		t.Fatalf("prepareHost for a second lab: %+v, %v; the first lab's record must stay", rec, err)
	}
	// The first lab goes: the other lab's node still uses both.
	if err := os.WriteFile(filepath.Join(nets, "kind.containers"), []byte("c0ffee\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := releaseHost(ctx, root, "podman", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(nets, "kind")); err != nil {
		t.Error("a network in use was removed")
	}
	if _, err := os.Stat(libModules); err != nil {
		t.Error("/lib/modules was removed while a kind cluster runs")
	}
	// The last one goes.
	os.Remove(filepath.Join(nets, "kind.containers"))
	releasedAll(ctx, t, root, nets)

	// What the host had is the host's: a network and a folder found are
	// never recorded, so never removed; nor is a folder filled since.
	if err := os.WriteFile(filepath.Join(nets, "kind"), []byte("true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(libModules, 0o755); err != nil {
		t.Fatal(err)
	}
	if rec, err = prepareHost(ctx, "podman", root, 3); err != nil || rec.Network != "" || rec.LibModules {
		t.Fatalf("prepareHost on a host that has both: %+v, %v; want nothing recorded", rec, err)
	}
	keptBoth(ctx, t, root, "podman", nets, "the host's own")
}

// keptBoth has a lab on engine go (releaseHost with no cluster left) and
// checks that podman's network kind and /lib/modules stay: whose they are.
func keptBoth(ctx context.Context, t *testing.T, root, engine, nets, whose string) {
	t.Helper()
	if err := releaseHost(ctx, root, engine, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(nets, "kind")); err != nil {
		t.Errorf("%s network was removed", whose)
	}
	if _, err := os.Stat(libModules); err != nil {
		t.Errorf("%s /lib/modules was removed", whose)
	}
}

// podman's CNI networks resolve container names only with the dnsname
// plugin: without it, or with a network made before it was installed, the
// lab refuses before any node is made and says what to install or remove.
func TestPodmanWithoutDNSIsRefused(t *testing.T) {
	ctx := context.Background()
	nets := fakeEngine(t)
	cniPluginDirs = []string{t.TempDir()}
	libModules = filepath.Join(t.TempDir(), "modules")
	root := t.TempDir()
	_, err := prepareHost(ctx, "podman", root, 3)
	if err == nil || !strings.Contains(err.Error(), "golang-github-containernetworking-plugin-dnsname") {
		t.Errorf("no dnsname plugin: %v", err)
	}
	if err := os.WriteFile(filepath.Join(nets, "kind"), []byte("false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = prepareHost(ctx, "podman", root, 3)
	if err == nil || !strings.Contains(err.Error(), "podman network rm kind") {
		t.Errorf("a network without DNS: %v", err)
	}
	if _, err := os.Stat(libModules); !os.IsNotExist(err) {
		t.Errorf("a refused lab made /lib/modules: %v", err)
	}
}

// A cluster the host's inotify limit has no room for is refused before
// any node is made, saying which limit and how to raise it.
func TestInotifyRoom(t *testing.T) {
	limit := inotifyLimit
	t.Cleanup(func() { inotifyLimit = limit })
	inotifyLimit = filepath.Join(t.TempDir(), "max_user_instances")
	for max, ok := range map[string]bool{"100000": true, "8": false} {
		if err := os.WriteFile(inotifyLimit, []byte(max+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := inotifyRoom(3)
		if (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "fs.inotify.max_user_instances=512")) {
			t.Errorf("limit %s: %v", max, err)
		}
	}
}

// The limit is per user: only the instances of the lab's user's processes
// count. A desktop session's hundreds (another user's) refuse nothing;
// as many of root's do.
func TestInotifyRoomCountsTheLabUsersOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes a process folder of another user: needs root, as the lab does")
	}
	limit, proc := inotifyLimit, procRoot
	t.Cleanup(func() { inotifyLimit, procRoot = limit, proc })
	inotifyLimit = filepath.Join(t.TempDir(), "max_user_instances")
	if err := os.WriteFile(inotifyLimit, []byte("128\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	procRoot = t.TempDir()
	process := func(pid string, uid, instances int) {
		fds := filepath.Join(procRoot, pid, "fd")
		if err := os.MkdirAll(fds, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range instances {
			if err := os.Symlink("anon_inode:inotify", filepath.Join(fds, strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("/dev/null", filepath.Join(fds, "x")); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(procRoot, pid), uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	process("100", os.Geteuid(), 10)
	process("200", 1000, 100)
	if got := inotifyInUse(os.Geteuid()); got != 10 {
		t.Errorf("root's instances: %d, want 10 (not the other user's 100)", got)
	}
	if err := inotifyRoom(3); err != nil {
		t.Errorf("10 of root's in use, 48 needed, limit 128: %v", err)
	}
	process("300", os.Geteuid(), 100)
	if err := inotifyRoom(3); err == nil || !strings.Contains(err.Error(), "110 are in use") {
		t.Errorf("110 of root's in use, 48 needed, limit 128: %v; want a refusal", err)
	}
}

// A lab on another engine does not make the host forget what the labs on
// the first one created: that stays recorded, and the first engine's
// lab:down removes it, /lib/modules only once no engine recorded runs a
// kind cluster. Before, the record was replaced, and the podman network
// and folder stayed for ever.
func TestAnotherEnginesLeftoversAreKept(t *testing.T) {
	ctx := context.Background()
	nets := fakeEngine(t)
	engineCommands(t, map[string]string{"podman": fakePodman, "docker": fakePodman, "cut": `/usr/bin/cut "$@"`, "cat": `/bin/cat "$@"`, "rm": `/bin/rm "$@"`})
	t.Setenv("KIND_EXPERIMENTAL_DOCKER_NETWORK", "kind-docker")
	root := hostWithDNSName(t)
	if _, err := prepareHost(ctx, "podman", root, 3); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nets, "kind"), []byte("true\n"), 0o600); err != nil {
		t.Fatal(err) // kind made podman's network
	}
	if rec, err := prepareHost(ctx, "docker", root, 3); err != nil || rec.Engine != "docker" || rec.Network != "kind-docker" || rec.LibModules {
		t.Fatalf("prepareHost on docker: %+v, %v; want docker's network alone recorded as docker's", rec, err)
	}
	all, err := readOwned(root)
	if err != nil || len(all.Earlier) != 1 || all.Earlier[0].Engine != "podman" || all.Earlier[0].Network != "kind" || !all.Earlier[0].LibModules {
		t.Fatalf("the record after a lab on docker: %+v, %v; want podman's kept", all, err)
	}
	keptBoth(ctx, t, root, "docker", nets, "on docker's lab:down, the podman labs'")
	releasedAll(ctx, t, root, nets)
}

// releasedAll has the last podman lab go (releaseHost with no cluster
// left), and checks that what the labs created went with it: the network
// kind made, /lib/modules, and the record.
func releasedAll(ctx context.Context, t *testing.T, root, nets string) {
	t.Helper()
	if err := releaseHost(ctx, root, "podman", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(nets, "kind")); !os.IsNotExist(err) {
		t.Errorf("the network the labs created is left: %v", err)
	}
	if _, err := os.Stat(libModules); !os.IsNotExist(err) {
		t.Errorf("the /lib/modules the labs created is left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, ownedFile)); !os.IsNotExist(err) {
		t.Errorf("the record outlives what it recorded: %v", err)
	}
}
