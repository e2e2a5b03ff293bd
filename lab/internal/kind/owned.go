package kind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
	kindlog "sigs.k8s.io/kind/pkg/log"
)

// libModules is the host folder kind mounts into every node, read-only,
// for any engine; an engine refuses to start a node where it is missing
// (podman: "no such file or directory"), as on hosts without kernel
// modules of their own (containers, some VMs). A variable for the tests.
var libModules = "/lib/modules"

// ownedFile records, in the state root of the kind labs, what they
// created on the host beside their nodes: one record for all of them, as
// every kind cluster shares what it finds.
const ownedFile = "kind-host.json"

// owned is what the kind labs created on the host beside their nodes, so
// that lab:down removes exactly that, once nothing else uses it: the
// engine network kind made for the first cluster, and an empty
// /lib/modules where the host had none.
type owned struct {
	Engine     string `json:"engine"`
	Network    string `json:"network,omitempty"`
	LibModules bool   `json:"libModules,omitempty"`
	// Earlier are the records of the engines the labs ran on before this
	// one, each kept until a lab:down on that engine releases it.
	Earlier []owned `json:"earlier,omitempty"`
}

// empty tells whether the record names nothing to remove.
func (rec owned) empty() bool { return rec.Network == "" && !rec.LibModules && len(rec.Earlier) == 0 }

// of takes out the record of engine (the current one, or an earlier one):
// it and the rest.
func (rec owned) of(engine string) (owned, owned) {
	if rec.Engine == engine || rec.Engine == "" {
		cur := rec
		cur.Engine, cur.Earlier = engine, nil
		rest := owned{}
		if len(rec.Earlier) > 0 {
			rest = rec.Earlier[len(rec.Earlier)-1]
			rest.Earlier = rec.Earlier[:len(rec.Earlier)-1]
		}
		return cur, rest
	}
	for i, e := range rec.Earlier {
		if e.Engine == engine {
			rest := rec
			rest.Earlier = slices.Delete(slices.Clone(rec.Earlier), i, i+1)
			return e, rest
		}
	}
	rest := rec
	return owned{Engine: engine}, rest
}

// with puts cur, engine's record, back as the current one, rest's current
// among the earlier; records that name nothing are dropped.
func (cur owned) with(rest owned) owned {
	out := cur
	out.Earlier = nil
	for _, e := range append(slices.Clone(rest.Earlier), owned{Engine: rest.Engine, Network: rest.Network, LibModules: rest.LibModules}) {
		if e.Engine != "" && e.Engine != cur.Engine && (e.Network != "" || e.LibModules) {
			out.Earlier = append(out.Earlier, e)
		}
	}
	return out
}

// networkName is the engine network kind puts its nodes on: "kind", or the
// one the user names as kind's own CLI reads it.
func networkName(engine string) string {
	if n := os.Getenv("KIND_EXPERIMENTAL_" + strings.ToUpper(engine) + "_NETWORK"); n != "" && engine != "nerdctl" {
		return n
	}
	return "kind"
}

// networkExists tells whether the engine has the network.
func networkExists(ctx context.Context, engine, name string) bool {
	return exec.CommandContext(ctx, engine, "network", "inspect", name).Run() == nil
}

// prepareHost readies the host for a new kind cluster on engine and
// records in the state root what it created: the /lib/modules kind
// mounts, where the host has none; and which network kind will create,
// where it is absent. It refuses, before any node is made, a podman whose
// network cannot name the nodes to each other (workers join the control
// plane by name).
func prepareHost(ctx context.Context, engine, root string, nodes int) (owned, error) {
	if err := inotifyRoom(nodes); err != nil {
		return owned{}, err
	}
	all, err := readOwned(root)
	if err != nil {
		return all, err
	}
	// What the labs on another engine created stays recorded, theirs to
	// remove at their lab:down.
	rec, rest := all.of(engine)
	network := networkName(engine)
	exists := networkExists(ctx, engine, network)
	if engine == "podman" {
		if err := podmanDNS(ctx, network, exists); err != nil {
			return rec, err
		}
	}
	if !exists {
		rec.Network = network
	}
	if _, err := os.Stat(libModules); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(libModules, 0o755); err != nil {
			return rec, fmt.Errorf("the host has no %s, which kind mounts into every node, and it cannot be made: %w", libModules, err)
		}
		rec.LibModules = true
	}
	return rec, writeOwned(root, rec.with(rest))
}

func readOwned(root string) (owned, error) {
	var rec owned
	data, err := os.ReadFile(filepath.Join(root, ownedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err != nil {
		return rec, fmt.Errorf("what the kind labs created on this host, %s: %w", filepath.Join(root, ownedFile), err)
	}
	return rec, nil
}

// writeOwned records rec, or removes the record where nothing is left.
func writeOwned(root string, rec owned) error {
	file := filepath.Join(root, ownedFile)
	if rec.empty() {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o600)
}

// cniPluginDirs are where podman looks for CNI plugins unless its
// configuration says otherwise.
var cniPluginDirs = []string{"/usr/local/libexec/cni", "/usr/libexec/cni", "/usr/local/lib/cni", "/usr/lib/cni", "/opt/cni/bin"}

// podmanDNS refuses a podman network without name resolution: on podman's
// CNI network backend, a network resolves its containers' names only with
// the dnsname plugin installed when it was created.
func podmanDNS(ctx context.Context, network string, exists bool) error {
	const plugin = "the dnsname CNI plugin (Debian: golang-github-containernetworking-plugin-dnsname)"
	if exists {
		out, err := exec.CommandContext(ctx, "podman", "network", "inspect", network, "--format", "{{.DNSEnabled}}").Output()
		if err == nil && strings.TrimSpace(string(out)) == "false" {
			return fmt.Errorf("podman's network %q resolves no container names (dns_enabled false), so kind's workers cannot find the control plane: install %s and remove the network (podman network rm %s)", network, plugin, network)
		}
		return nil
	}
	out, err := exec.CommandContext(ctx, "podman", "info", "--format", "{{.Host.NetworkBackend}}").Output()
	if err != nil || strings.TrimSpace(string(out)) != "cni" {
		return nil // netavark resolves names with aardvark-dns, packaged with it
	}
	if !slices.ContainsFunc(cniPluginDirs, func(d string) bool { _, err := os.Stat(filepath.Join(d, "dnsname")); return err == nil }) {
		return fmt.Errorf("podman's CNI networks resolve no container names without %s, so kind's workers could not find the control plane: install it", plugin)
	}
	return nil
}

// releaseHost removes what the kind labs of the state root recorded
// creating on engine (prepareHost), once nothing uses it: the network when
// no container is left on it, /lib/modules when no kind cluster is left on
// the engine nor on any other engine recorded (one that does not answer
// may still run nodes that mount it) and the folder is still empty.
func releaseHost(ctx context.Context, root, engine string, clustersLeft int) error {
	all, err := readOwned(root)
	if err != nil || all.empty() {
		return err
	}
	rec, rest := all.of(engine)
	logger := klog.FromContext(ctx)
	var errs []error
	if rec.Network != "" && networkExists(ctx, rec.Engine, rec.Network) {
		out, err := exec.CommandContext(ctx, rec.Engine, "ps", "-aq", "--filter", "network="+rec.Network).Output()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("listing the containers on network %s: %w", rec.Network, err))
		case strings.TrimSpace(string(out)) != "":
			logger.Info("Keeping the network the lab created: containers use it", "network", rec.Network)
		default:
			if out, err := exec.CommandContext(ctx, rec.Engine, "network", "rm", rec.Network).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s network rm %s: %w: %s", rec.Engine, rec.Network, err, strings.TrimSpace(string(out))))
			} else {
				rec.Network = ""
			}
		}
	} else {
		rec.Network = ""
	}
	if rec.LibModules && clustersLeft == 0 && othersIdle(rest) {
		// Remove fails on a folder something has filled since: it is not
		// the lab's to remove any more.
		if err := os.Remove(libModules); err != nil && !errors.Is(err, fs.ErrNotExist) {
			logger.Info("Keeping the folder the lab created: it is not empty", "path", libModules, "err", err)
		}
		rec.LibModules = false
	}
	return errors.Join(append(errs, writeOwned(root, rec.with(rest)))...)
}

// othersIdle tells whether the other engines recorded run no kind
// cluster: each answers, with none.
func othersIdle(rest owned) bool {
	for _, e := range append(slices.Clone(rest.Earlier), rest) {
		if e.Engine == "" {
			continue
		}
		if _, _, clusters, err := pickEngineNamed(kindlog.NoopLogger{}, e.Engine); err != nil || len(clusters) > 0 {
			return false
		}
	}
	return true
}

// inotifyPerNode is how many inotify instances a kind node takes at the
// least (systemd, containerd, the kubelet, the driver): about 15 measured
// here on the lab's own image; the lower bound refuses no cluster that
// would come up.
const inotifyPerNode = 12

// inotifyLimit is the kernel's per-user limit on inotify instances; the
// nodes' processes all run as the engine's user (root, without user
// namespaces). A variable for the tests.
var inotifyLimit = "/proc/sys/fs/inotify/max_user_instances"

// procRoot is where the processes are read (/proc). A variable for the
// tests.
var procRoot = "/proc"

// inotifyInUse counts the inotify instances of the processes of user uid:
// the limit is per user, and another user's (a desktop session's) take
// none of the nodes' room.
func inotifyInUse(uid int) int {
	used := 0
	owners := map[string]bool{}
	links, _ := filepath.Glob(filepath.Join(procRoot, "[0-9]*", "fd", "*"))
	for _, l := range links {
		pid := filepath.Dir(filepath.Dir(l))
		ours, seen := owners[pid]
		if !seen {
			ours = ownedBy(pid, uid)
			owners[pid] = ours
		}
		if !ours {
			continue
		}
		if target, err := os.Readlink(l); err == nil && target == "anon_inode:inotify" {
			used++
		}
	}
	return used
}

// ownedBy tells whether the file (a process's /proc folder) is uid's.
func ownedBy(file string, uid int) bool {
	fi, err := os.Stat(file)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid
}

// inotifyRoom refuses a cluster of n nodes whose processes could not
// watch files: past the per-user limit on inotify instances the kubelets
// fail ("too many open files") and never register, which kind's own
// error does not say. Only the instances of the lab's user (root, the
// engine's) are counted, the nodes being that user's.
func inotifyRoom(nodes int) error {
	data, err := os.ReadFile(inotifyLimit)
	if err != nil {
		return nil // another kernel: nothing to tell
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return nil
	}
	used := inotifyInUse(os.Geteuid())
	need := inotifyPerNode * (nodes + 1)
	if used+need > limit {
		return fmt.Errorf("this host allows %d inotify instances per user (fs.inotify.max_user_instances) and %d are in use: a kind cluster of %d nodes needs about %d more, without which its kubelets fail (\"too many open files\") and never register; delete another cluster or raise the limit (sysctl fs.inotify.max_user_instances=512)", limit, used, nodes+1, need)
	}
	return nil
}
