// Package conformance runs dralab's DRA driver conformance suite for the
// driver a manifest (package manifest) describes: layer 1, kubelet-plugin
// sanity over gRPC (package sanity), and layer 2, cluster features with
// e2e-framework (package cluster). Run drives both through `go test -json`
// on e2e/conformance and turns the result into a summary and JUnit XML.
package conformance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/conformance/target"
)

// Layers select what Run runs.
const (
	LayerAll     = ""
	LayerSanity  = "sanity"
	LayerCluster = "cluster"
)

// Options of a conformance run.
type Options struct {
	// Manifest is the driver's manifest file (required).
	Manifest string
	// Kubeconfig runs against that cluster: a dralab lab's own kubeconfig,
	// or any cluster whose context Target names. Empty: an embedded lab of
	// LabConfig (empty: the default lab) that the run starts and deletes.
	Kubeconfig string
	LabConfig  string
	// Target is the kubeconfig context the caller allows the suite to run
	// on although it is not a dralab lab (what DRALAB_TARGET says): the
	// suite creates and deletes namespaces, claims and DeviceTaintRules
	// there. A Kubeconfig alone is not that consent.
	Target string
	// Layer is LayerAll, LayerSanity or LayerCluster.
	Layer string
	// JUnit is the JUnit XML file to write; empty: none.
	JUnit string
	// Log receives the test output as it runs; nil: discarded.
	Log io.Writer
	// Env is added to the test's environment.
	Env []string
	// Lab tells whether Kubeconfig is a lab's own (target.Request.Lab).
	Lab func(kubeconfig, server string) (dir string, ok bool)
}

// ErrNoConsent means Options.Kubeconfig is not a dralab lab's and
// Options.Target does not name its context.
var ErrNoConsent = target.ErrNoConsent

// Run runs the suite and returns its report; an error means the suite
// could not run (a bad manifest, a cluster it may not use, a build
// failure), not that checks failed: see Report.Failed.
func Run(ctx context.Context, o Options) (*results.Report, error) {
	// A bad manifest or a cluster the suite may not touch is one clear
	// error before anything is built.
	if _, err := manifest.Load(o.Manifest); err != nil {
		return nil, err
	}
	if _, err := Where(o); err != nil {
		return nil, err
	}
	abs := func(p string) (string, error) {
		if p == "" {
			return "", nil
		}
		return filepath.Abs(p)
	}
	var err error
	if o.Manifest, err = abs(o.Manifest); err != nil {
		return nil, err
	}
	if o.LabConfig, err = abs(o.LabConfig); err != nil {
		return nil, err
	}
	if o.Kubeconfig, err = abs(o.Kubeconfig); err != nil {
		return nil, err
	}
	args := []string{"test", "-json", "-count=1", "-timeout=30m"}
	switch o.Layer {
	case LayerAll:
	case LayerSanity:
		args = append(args, "-run=^TestSanity$")
	case LayerCluster:
		args = append(args, "-run=^TestCluster$")
	default:
		return nil, fmt.Errorf("layer %q: want %s, %s or both (empty)", o.Layer, LayerSanity, LayerCluster)
	}
	args = append(args, "github.com/dralab/dralab/e2e/conformance", "-args", "--manifest="+o.Manifest)
	if o.Kubeconfig != "" {
		args = append(args, "--kubeconfig="+o.Kubeconfig)
	} else if o.LabConfig != "" {
		args = append(args, "--lab-config="+o.LabConfig)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	// The suite's TestMain checks the target again, with this consent.
	cmd.Env = append(append(os.Environ(), o.Env...), target.EnvConsent+"="+o.Target)
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	cmd.Stdout = io.MultiWriter(&out, log)
	cmd.Stderr = log
	// go test exits non-zero when a check fails: the report says which.
	_ = cmd.Run()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	report, err := results.Parse(&out)
	if err != nil {
		return nil, err
	}
	if len(report.Cases) == 0 {
		return nil, fmt.Errorf("%v ran no check", cmd.Args)
	}
	if o.JUnit != "" {
		f, err := os.Create(o.JUnit)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := report.WriteXML(f, "dralab conformance: "+filepath.Base(o.Manifest)); err != nil {
			return nil, err
		}
	}
	return report, nil
}

// Where says where Run would run: "a fresh embedded lab", or the context
// and server of Options.Kubeconfig. It fails, with an error wrapping
// ErrNoConsent that names the context, its server and how to consent, when
// the kubeconfig is not a dralab lab's and Options.Target does not name
// its context.
func Where(o Options) (string, error) {
	t, err := target.Resolve(target.Request{Kubeconfig: o.Kubeconfig, Consent: o.Target, Lab: o.Lab})
	if err != nil {
		return "", err
	}
	return t.String(), nil
}
