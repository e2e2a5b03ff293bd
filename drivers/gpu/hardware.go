package gpu

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
)

// What GPU inventories share about the hardware they describe, whether it
// exists (NVML) or not (fake profiles, NVML mock servers).

// NormalizeVersion turns a driver-style version into semantic version
// form, as DRA version attributes require: "9.0" → "9.0.0",
// "550.127.05" → "550.127.5" (semver forbids leading zeros).
func NormalizeVersion(v string) (string, error) {
	if v == "" {
		return "", errors.New("empty version")
	}
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return "", fmt.Errorf("%q has more than three parts", v)
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		trimmed := strings.TrimLeft(p, "0")
		if trimmed == "" {
			trimmed = "0"
		}
		parts[i] = trimmed
	}
	out := strings.Join(parts, ".")
	if _, err := semver.Parse(out); err != nil {
		return "", fmt.Errorf("%q is not a version: %w", v, err)
	}
	return out, nil
}

// DeviceUUID is the UUID of a GPU that has none of its own (a fake GPU, a
// GPU of an NVML mock server), in NVML's "GPU-" form: derived from the node
// and the GPU's index, so stable across restarts and distinct across
// nodes.
func DeviceUUID(node string, index int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("dralab/%s/%d", node, index)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
}
