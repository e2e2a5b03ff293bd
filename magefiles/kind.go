//go:build mage

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab"
)

// Kind builds what a kind lab runs on.
type Kind mg.Namespace

// NodeImage builds the kind node image of the lab's own Kubernetes
// (v1.37.2) without any registry — a Debian root filesystem from Debian's
// packages, kind's base files from the sigs.k8s.io/kind module, Kubernetes,
// containerd and crictl from Go modules, the control plane's images and
// the lab's driver image inside — and loads it into the container engine
// that answers. The same inputs are built once; the first build compiles
// kubeadm, kube-proxy and kubectl (minutes).
func (Kind) NodeImage(ctx context.Context) error {
	u := ui.Stderr()
	start := time.Now()
	img, err := lab.BuildKindNodeImage(ui.WithLive(ctx, u.Live), lab.WithProgress(u.Step))
	if err != nil {
		return err
	}
	how := "built"
	if img.Reused {
		how = "reused"
	}
	u.Println(fmt.Sprintf("Node image %s (%s in %s): %s, %.0f MB", img.Name, how, time.Since(start).Round(time.Second), img.Archive, float64(img.Size)/1e6))
	if img.Engine == "" {
		u.Println("No container engine answers, so it is loaded into none: " + img.Why)
		u.Println("Load it where one runs: podman load -i " + img.Archive + " (or docker load -i)")
		return nil
	}
	u.Println(fmt.Sprintf("Loaded into %s. A kind lab runs it with: DRALAB_BACKEND=kind %s=%s go run mage.go lab:up", img.Engine, lab.EnvKindNodeImage, img.Name))
	return nil
}
