//go:build mage

package main

import (
	"context"
	"os"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/internal/harness/devicecheck"
)

// Device checks real hardware.
type Device mg.Namespace

// Check runs the NVML driver against this machine's NVIDIA GPUs, end to
// end in one command (≤ 3 min): enumerate them, bring up an embedded lab
// with one node carrying the NVML driver, allocate and prepare a claim for
// the first GPU's product, print the slice and the CDI spec.
// DRALAB_NVML=mock:dgxh100 runs the same path on a mock.
func (Device) Check(ctx context.Context) error {
	source := os.Getenv("DRALAB_NVML")
	if source == "" {
		source = "host"
	}
	return devicecheck.Run(ctx, devicecheck.Options{NVML: source, Out: os.Stdout})
}
