//go:build mage

package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/realnode"
)

// Deps installs host packages.
type Deps mg.Namespace

// Build installs the C compiler the driver's cgo build (NVML) needs, when
// it is missing.
func (Deps) Build() error {
	if _, err := exec.LookPath("gcc"); err == nil {
		fmt.Println("A C compiler is installed.")
		return nil
	}
	return aptInstall("gcc", "libc6-dev")
}

// Cross installs Debian's C cross-compiler for linux/arm64, which
// test:platforms needs for the driver's cgo build there, when it is
// missing.
func (Deps) Cross() error {
	if _, err := exec.LookPath(build.ArmLinuxCC); err == nil {
		fmt.Println("The linux/arm64 C cross-compiler is installed.")
		return nil
	}
	return aptInstall("gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross")
}

// Realnode installs what a real lab node needs from Debian's packages:
// runc, the CNI plugins, busybox-static (for the images) and iptables.
func (Deps) Realnode() error {
	if len(realnode.MissingHostPrograms()) == 0 {
		fmt.Println("The real node's host packages are installed.")
		return nil
	}
	return aptInstall(realnode.HostPackages...)
}

// kindHostPackages are Debian's packages a kind lab runs on and its node
// image is built with: podman (Debian's Docker cannot run kind's
// privileged nodes where the engine lacks CAP_SYS_RESOURCE), runc
// (podman takes crun where no runtime is installed, and crun refuses hosts
// whose cgroups are hybrid, v1 and v2 at once; installed in the same
// apt-get, runc is the runtime podman gets), the dnsname CNI plugin with
// which podman's networks resolve the nodes' names, and mmdebstrap, which
// makes the node's root filesystem from Debian's packages.
var kindHostPackages = map[string]string{
	"podman":               "podman",
	"runc":                 "runc",
	"mmdebstrap":           "mmdebstrap",
	"/usr/lib/cni/dnsname": "golang-github-containernetworking-plugin-dnsname",
}

// Kind installs what a kind lab needs from Debian's packages — podman
// with runc, its dnsname plugin and mmdebstrap (kind:nodeImage) — when it
// is missing.
func (Deps) Kind() error {
	var missing []string
	for program, pkg := range kindHostPackages {
		if _, err := exec.LookPath(program); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		fmt.Println("podman, runc, podman's dnsname plugin and mmdebstrap are installed.")
		return nil
	}
	slices.Sort(missing)
	return aptInstall(missing...)
}

// Browser installs Debian's Chromium, in which the dashboard's tests open
// the page (with chromedp), when it is missing.
func (Deps) Browser() error {
	// The plots name Liberation fonts; without them Chromium falls back to
	// wider ones than gonum laid the text out with.
	const fonts = "/usr/share/fonts/truetype/liberation"
	_, err := exec.LookPath(dashboard.Chromium)
	if _, ferr := os.Stat(fonts); err == nil && ferr == nil {
		fmt.Println("Chromium is installed.")
		return nil
	}
	return aptInstall("chromium", "fonts-liberation")
}

func aptInstall(packages ...string) error {
	args := append([]string{"install", "-y", "-q", "--no-install-recommends"}, packages...)
	env := map[string]string{"DEBIAN_FRONTEND": "noninteractive"}
	if os.Geteuid() != 0 {
		return fmt.Errorf("installing %v needs root: sudo apt-get %v", packages, args)
	}
	if err := sh.RunWithV(env, "apt-get", "update", "-q"); err != nil {
		return err
	}
	return sh.RunWithV(env, "apt-get", args...)
}
