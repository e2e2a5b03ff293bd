package kind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// A kind lab's podman runs with a containers.conf of the lab's: the host's
// own configuration, with the few settings the lab's nodes need over it.
// Podman takes a partial configuration over its chain of files from
// CONTAINERS_CONF_OVERRIDE only from 4.4 on (Debian bookworm's 4.3.1
// ignores it), and CONTAINERS_CONF replaces the whole chain: so the lab
// merges the chain as podman does (each file's keys over the earlier
// ones', tables key by key) and its own settings last, and names the
// result with CONTAINERS_CONF on every podman command it runs for the lab
// (create, delete, status, logs). The host's files are read, never
// written.

// envContainersConf is the variable naming podman's one containers.conf.
const envContainersConf = "CONTAINERS_CONF"

// podmanConfFile is the lab's containers.conf in its state directory.
const podmanConfFile = "containers.conf"

// podmanChain is the chain of containers.conf files podman reads, in
// order, under root ("/" but in tests): the distribution's, the
// administrator's and the administrator's drop-ins in name order; for a
// user other than root, also the user's own and drop-ins under
// configHome ($XDG_CONFIG_HOME, else ~/.config). Files that do not exist
// are left out.
func podmanChain(root string, rootless bool, configHome string) ([]string, error) {
	var out []string
	add := func(file, dropIns string) error {
		if _, err := os.Stat(file); err == nil {
			out = append(out, file)
		}
		files, err := filepath.Glob(filepath.Join(dropIns, "*.conf"))
		if err != nil {
			return err
		}
		slices.Sort(files)
		out = append(out, files...)
		return nil
	}
	if _, err := os.Stat(filepath.Join(root, "usr/share/containers/containers.conf")); err == nil {
		out = append(out, filepath.Join(root, "usr/share/containers/containers.conf"))
	}
	if err := add(filepath.Join(root, "etc/containers/containers.conf"), filepath.Join(root, "etc/containers/containers.conf.d")); err != nil {
		return nil, err
	}
	if rootless && configHome != "" {
		if err := add(filepath.Join(configHome, "containers/containers.conf"), filepath.Join(configHome, "containers/containers.conf.d")); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// mergeConf merges over into base as podman merges its files: a key of
// over replaces base's, a table is merged key by key.
func mergeConf(base, over map[string]any) {
	for k, v := range over {
		if t, ok := v.(map[string]any); ok {
			if bt, ok := base[k].(map[string]any); ok {
				mergeConf(bt, t)
				continue
			}
			c := map[string]any{}
			mergeConf(c, t)
			base[k] = c
			continue
		}
		base[k] = v
	}
}

// podmanConf is the containers.conf of the chain's files with settings
// over them, as TOML.
func podmanConf(chain []string, settings map[string]any) ([]byte, error) {
	merged := map[string]any{}
	for _, f := range chain {
		var m map[string]any
		if _, err := toml.DecodeFile(f, &m); err != nil {
			return nil, fmt.Errorf("podman's configuration %s: %w", f, err)
		}
		mergeConf(merged, m)
	}
	mergeConf(merged, settings)
	var out bytes.Buffer
	out.WriteString("# Written by dralab for a kind lab's podman commands: the host's containers.conf files\n# (" + strings.Join(chain, ", ") + ")\n# merged, with the lab's settings over them. The host's files are not changed.\n")
	if err := toml.NewEncoder(&out).Encode(merged); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// ErrNoRuntime: podman's OCI runtime cannot run containers on this host,
// and no other that can is installed.
var ErrNoRuntime = errors.New("podman has no OCI runtime that runs containers on this host")

// podmanSettings are the settings a lab's podman needs on host h over the
// host's own configuration: rlimits the host allows where the engine lacks
// CAP_SYS_RESOURCE, and runc where podman's runtime is crun and the host
// mounts cgroups hybrid (crun refuses: "cgroups in hybrid mode not
// supported"). runtime is podman's runtime as it reports it;
// runcInstalled whether runc is. nil: none needed.
func (h Host) podmanSettings(runtime string, runcInstalled bool) (map[string]any, error) {
	settings := map[string]any{}
	if h.NoSysResource {
		settings["containers"] = map[string]any{"default_ulimits": []any{"nofile=20000:20000", "nproc=4096:4096"}}
	}
	if h.HybridCgroups && runtime == "crun" {
		if !runcInstalled {
			return nil, fmt.Errorf("%w: its runtime crun refuses hosts that mount cgroups v1 and v2 at once (hybrid, as this one), and runc is not installed: apt-get install runc (go run mage.go deps:kind installs it with podman)", ErrNoRuntime)
		}
		settings["engine"] = map[string]any{"runtime": "runc"}
	}
	if len(settings) == 0 {
		return nil, nil
	}
	return settings, nil
}

// podmanRuntime is the OCI runtime podman runs containers with, in its
// own configuration.
func podmanRuntime(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", "info", "--format", "{{.Host.OCIRuntime.Name}}")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, envContainersConf+"=") })
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return "", fmt.Errorf("podman info: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// writePodmanConf writes the lab's containers.conf into dir where host h
// needs settings over podman's own configuration, and returns its path;
// "" where none are needed, or where the user names a containers.conf
// (CONTAINERS_CONF) already: theirs to keep. It fails, before any node is
// made, where podman has no runtime that runs on the host.
func (h Host) writePodmanConf(ctx context.Context, dir string) (string, error) {
	if os.Getenv(envContainersConf) != "" {
		return "", nil
	}
	runtime, err := podmanRuntime(ctx)
	if err != nil {
		return "", err
	}
	_, lookErr := exec.LookPath("runc")
	settings, err := h.podmanSettings(runtime, lookErr == nil)
	file := filepath.Join(dir, podmanConfFile)
	if err != nil || settings == nil {
		// An earlier lab's of the name must not stay in force.
		if rerr := os.Remove(file); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = rerr
		}
		return "", err
	}
	configHome := os.Getenv("XDG_CONFIG_HOME")
	if home, herr := os.UserHomeDir(); configHome == "" && herr == nil {
		configHome = filepath.Join(home, ".config")
	}
	chain, err := podmanChain("/", os.Geteuid() != 0, configHome)
	if err != nil {
		return "", err
	}
	data, err := podmanConf(chain, settings)
	if err != nil {
		return "", err
	}
	return file, os.WriteFile(file, data, 0o600)
}

// usePodmanConf has this process's podman commands (kind's among them) use
// the lab's containers.conf in dir, where the lab has one and the user
// names none.
func usePodmanConf(dir string) error {
	file := filepath.Join(dir, podmanConfFile)
	if os.Getenv(envContainersConf) != "" {
		return nil
	}
	if _, err := os.Stat(file); err != nil {
		return nil
	}
	return os.Setenv(envContainersConf, file)
}
