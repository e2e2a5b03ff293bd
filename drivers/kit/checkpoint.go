package kit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	sigsjson "sigs.k8s.io/json"
)

// CheckpointVersion is the version of the checkpoint format.
const CheckpointVersion = "dralab.dev/checkpoint/v1"

// ErrCorruptCheckpoint means the checkpoint file cannot be trusted. The
// driver refuses to start rather than forget or double-prepare claims.
var ErrCorruptCheckpoint = errors.New("corrupt checkpoint")

// Checkpoint is what a driver remembers across restarts: every claim it
// has prepared and not yet unprepared.
type Checkpoint struct {
	Version string `json:"version"`
	Driver  string `json:"driver"`
	Node    string `json:"node"`
	// Claims are keyed by claim UID.
	Claims map[types.UID]*PreparedClaim `json:"claims"`
}

// PreparedClaim is one prepared claim.
type PreparedClaim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// CDISpec is the claim's CDI spec file name in the CDI directory.
	CDISpec string           `json:"cdiSpec"`
	Devices []PreparedDevice `json:"devices"`
	// Preparing is true while a DevicePreparer readies the claim's devices:
	// written before the first device is touched, so that a driver that
	// stops in the middle knows to undo what may have been done.
	Preparing bool `json:"preparing,omitempty"`
}

// PreparedDevice is one device of a prepared claim.
type PreparedDevice struct {
	Requests     []string `json:"requests"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
	// Shared is true for admin access and shared (consumable capacity)
	// allocations, which may hold the device together with other claims.
	Shared bool `json:"shared,omitempty"`
	// ConfigEnv are the variables the claim's configuration gives the
	// device, kept to rewrite a lost CDI spec without the claim.
	ConfigEnv map[string]string `json:"configEnv,omitempty"`
	// ShareID identifies the claim's share of a device that several
	// allocations share (consumable capacity); empty for a whole device.
	// A device is prepared once per share: its CDI device is named by
	// claim, device and share.
	ShareID string `json:"shareID,omitempty"`
	// ConsumedCapacity is what the share may use of the device, by
	// capacity name, as the allocation result says.
	ConsumedCapacity map[string]resource.Quantity `json:"consumedCapacity,omitempty"`
	// State, Env and ClaimEnv are what a DevicePreparer made of the
	// device (DevicePrepared): what undoing it needs, and its variables.
	State    json.RawMessage   `json:"state,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	ClaimEnv map[string]string `json:"claimEnv,omitempty"`
	// StatusData is what the preparation adds to the device's data in
	// the claim's status.
	StatusData map[string]string `json:"statusData,omitempty"`
}

func newCheckpoint(driver, node string) *Checkpoint {
	return &Checkpoint{Version: CheckpointVersion, Driver: driver, Node: node, Claims: map[types.UID]*PreparedClaim{}}
}

// loadCheckpoint reads a driver's checkpoint; a missing file is an empty
// checkpoint. One of another driver or node is ErrCorruptCheckpoint.
func loadCheckpoint(path, driver, node string) (*Checkpoint, error) {
	cp, err := ReadCheckpoint(path)
	if errors.Is(err, os.ErrNotExist) {
		return newCheckpoint(driver, node), nil
	}
	if err != nil {
		return nil, err
	}
	if cp.Driver != driver || cp.Node != node {
		return nil, corruptCheckpoint(path, "it belongs to driver %q on node %q, not %q on %q", cp.Driver, cp.Node, driver, node)
	}
	return cp, nil
}

func corruptCheckpoint(path, why string, args ...any) error {
	return fmt.Errorf("%w %s: %s; move the file away to start with no prepared claims (the kubelet will prepare running pods' claims again)",
		ErrCorruptCheckpoint, path, fmt.Sprintf(why, args...))
}

// ReadCheckpoint reads a checkpoint file. One that does not decode
// strictly or has another version is ErrCorruptCheckpoint, naming the file.
func ReadCheckpoint(path string) (*Checkpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseCheckpoint(path, data)
}

// parseCheckpoint decodes a checkpoint file's contents; path names it in
// errors.
func parseCheckpoint(path string, data []byte) (*Checkpoint, error) {
	corrupt := func(why string, args ...any) error { return corruptCheckpoint(path, why, args...) }
	var cp Checkpoint
	strict, err := sigsjson.UnmarshalStrict(data, &cp)
	if err != nil {
		return nil, corrupt("%v", err)
	}
	if len(strict) > 0 {
		return nil, corrupt("%v", errors.Join(strict...))
	}
	if cp.Version != CheckpointVersion {
		return nil, corrupt("version %q, want %q", cp.Version, CheckpointVersion)
	}
	if cp.Claims == nil {
		cp.Claims = map[types.UID]*PreparedClaim{}
	}
	for uid, c := range cp.Claims {
		if c == nil {
			return nil, corrupt("claim %s is null", uid)
		}
		if c.CDISpec == "" && !c.Preparing {
			return nil, corrupt("claim %s has no CDI spec", uid)
		}
	}
	return &cp, nil
}

// save writes the checkpoint atomically: a crash leaves the old file or
// the new one, never a torn one.
func (cp *Checkpoint) save(path string) error {
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomically(path, data, 0o600)
}

// WriteFileAtomically replaces path with data, creating its directory:
// renameio writes a temporary file beside it, syncs it and renames it over
// path; then the directory is synced, so that the rename survives a crash
// too. perm is the file's mode, the umask aside.
func WriteFileAtomically(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if err := renameio.WriteFile(path, data, perm, renameio.WithStaticPermissions(perm)); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// holder returns another claim that holds the device exclusively while the
// caller wants it exclusively too: the one conflict a driver must refuse.
// Admin access and shared allocations coexist with anything.
func (cp *Checkpoint) holder(pool, device string, uid types.UID, shared bool) (types.UID, *PreparedClaim) {
	for other, c := range cp.Claims {
		if other == uid {
			continue
		}
		for _, d := range c.Devices {
			if d.Pool == pool && d.Device == device && !shared && !d.Shared {
				return other, c
			}
		}
	}
	return "", nil
}
