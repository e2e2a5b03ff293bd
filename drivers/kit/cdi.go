package kit

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// cdiDeviceName names a prepared device's CDI device: by claim and device,
// and by share, as one claim may hold several shares of one device.
func cdiDeviceName(claim types.UID, pd PreparedDevice) string {
	name := string(claim) + "-" + pd.Device
	if pd.ShareID != "" {
		name += "-" + pd.ShareID
	}
	return name
}

// shareEnv is what a device share sets besides the device's own variables.
func shareEnv(pd PreparedDevice) map[string]string {
	if pd.ShareID == "" {
		return nil
	}
	env := map[string]string{EnvShareID: pd.ShareID}
	for name, q := range pd.ConsumedCapacity {
		// A capacity of another domain is named domain/name.
		_, short, ok := strings.Cut(name, "/")
		if !ok {
			short = name
		}
		env[envName(short)+envLimitSuffix] = q.String()
	}
	return env
}

// envName makes a capacity's name a variable's: upper case, with
// underscores for anything else than letters and digits.
func envName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, s)
}

// edits are a device's container edits as the n-th device of its claim,
// with its configuration's and its share's variables.
func (d *Driver) edits(n int, dev Device, pd PreparedDevice) cdispec.ContainerEdits {
	var edits cdispec.ContainerEdits
	if share := shareEnv(pd); len(pd.Env) > 0 || len(pd.ConfigEnv) > 0 || len(share) > 0 {
		env := make(map[string]string, len(dev.Env)+len(pd.Env)+len(pd.ConfigEnv)+len(share))
		maps.Copy(env, dev.Env)
		maps.Copy(env, pd.Env)
		maps.Copy(env, pd.ConfigEnv)
		maps.Copy(env, share)
		dev.Env = env
	}
	for _, kv := range deviceEnv(d.opts.EnvPrefix, n, dev) {
		edits.Env = append(edits.Env, kv[0]+"="+kv[1])
	}
	edits.DeviceNodes = cdiDeviceNodes(dev.DeviceNodes)
	for _, h := range dev.Hooks {
		edits.Hooks = append(edits.Hooks, &cdispec.Hook{HookName: h.HookName, Path: h.Path, Args: h.Args})
	}
	return edits
}

func cdiDeviceNodes(nodes []DeviceNode) []*cdispec.DeviceNode {
	var out []*cdispec.DeviceNode
	for _, n := range nodes {
		out = append(out, &cdispec.DeviceNode{Path: n.Path, HostPath: n.HostPath})
	}
	return out
}

// nodeDeviceName names the node-wide CDI device; claims' devices are named
// <claim UID>-<device>, never this.
const nodeDeviceName = "node"

// syncNodeSpec keeps the node-wide CDI spec exactly while a claim is
// prepared: the kubelet may create a container of a prepared claim at any
// time (and keeps the CDI IDs it got, whatever the driver's configuration
// becomes), while with no claim prepared the driver leaves nothing in the
// CDI directory. rewrite writes the spec even if it exists.
func (d *Driver) syncNodeSpec(rewrite bool) error {
	if len(d.cp.Claims) == 0 {
		return d.removeSpec(d.nodeSpec)
	}
	if d.nodeDevice == "" {
		// A spec of an earlier configuration stays for the claims
		// prepared with it.
		return nil
	}
	if !rewrite {
		if _, err := os.Stat(filepath.Join(d.opts.CDIDir, d.nodeSpec)); err == nil {
			return nil
		}
	}
	edits := cdispec.ContainerEdits{DeviceNodes: cdiDeviceNodes(d.nodeEdits.DeviceNodes)}
	for _, k := range slices.Sorted(maps.Keys(d.nodeEdits.Env)) {
		edits.Env = append(edits.Env, k+"="+d.nodeEdits.Env[k])
	}
	spec := &cdispec.Spec{
		Version: cdispec.CurrentVersion, Kind: d.opts.CDIKind,
		Devices: []cdispec.Device{{Name: nodeDeviceName, ContainerEdits: edits}},
	}
	return d.cdi.WriteSpec(spec, d.nodeSpec)
}

// ensureSpec rewrites a prepared claim's CDI spec if it went missing.
func (d *Driver) ensureSpec(uid types.UID, c *PreparedClaim) error {
	if _, err := os.Stat(filepath.Join(d.opts.CDIDir, c.CDISpec)); err == nil {
		return nil
	}
	spec, err := d.specOf(uid, c)
	if err != nil {
		return err
	}
	return d.cdi.WriteSpec(spec, c.CDISpec)
}

// specOf is a prepared claim's CDI spec: a device per prepared device, and
// the claim-wide edits.
func (d *Driver) specOf(uid types.UID, c *PreparedClaim) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Version: cdispec.CurrentVersion, Kind: d.opts.CDIKind}
	for i, pd := range c.Devices {
		dev, ok := d.devices[pd.Device]
		if !ok {
			return nil, fmt.Errorf("prepared claim %s uses device %q, which is no longer in the inventory", uid, pd.Device)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: cdiDeviceName(uid, pd), ContainerEdits: d.edits(i, dev, pd)})
	}
	spec.ContainerEdits = claimEdits(d.devicesOf(c))
	return spec, nil
}

// claimEdits are the claim-wide edits: a spec's own edits apply once when
// any of its devices is injected, and the spec holds one claim, so a
// variable listing all the claim's devices is set exactly once.
func claimEdits(devs []Device) cdispec.ContainerEdits {
	env := claimEnv(devs)
	var edits cdispec.ContainerEdits
	for _, k := range slices.Sorted(maps.Keys(env)) {
		edits.Env = append(edits.Env, k+"="+env[k])
	}
	return edits
}

// claimEnv is what devices set once for all of them (Device.ClaimEnv):
// each variable's values in the devices' order, joined by commas.
func claimEnv(devs []Device) map[string]string {
	values := map[string][]string{}
	for _, dev := range devs {
		for k, v := range dev.ClaimEnv {
			values[k] = append(values[k], v)
		}
	}
	out := make(map[string]string, len(values))
	for k, v := range values {
		out[k] = strings.Join(v, ",")
	}
	return out
}

func (d *Driver) removeSpec(name string) error {
	err := d.cdi.RemoveSpec(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Share variables: a share's ID, and what it may use of each capacity it
// consumed (<capacity>_LIMIT, e.g. MEMORY_LIMIT=8Gi).
const (
	EnvShareID     = "SHARE_ID"
	envLimitSuffix = "_LIMIT"
)
