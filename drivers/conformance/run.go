// Package conformance runs dralab's DRA driver conformance suite for the
// driver a manifest (package manifest) describes, in-process: layer 1,
// kubelet-plugin sanity over gRPC (package sanity), where the plugin's
// sockets can be reached, and layer 2, cluster features (package cluster),
// on any cluster the caller may use (package target). It returns one
// results.Case per check, which results writes as JUnit XML and a summary.
//
// cmd/dralab-conformance runs it from a driver's CI; dralab's
// conformance:run runs it on an embedded lab it starts itself.
//
// The module is dralab's light one, which needs no Kubernetes module and
// takes no replace directive, so that a driver's CI installs from it.
// Beside the suite it holds the device model the checks read (package
// devices, with the allocator's CEL), the reading of a cluster's
// allocations and of why a pod waits (package allocation), and the input
// checks (strictyaml, nearest, fuzzcheck): dralab's own module uses them
// too, and Go modules reach each other only through published versions,
// so what both use lives here, once.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/drivers/conformance/target"
)

// Layers select what Run runs.
const (
	LayerAll     = ""
	LayerSanity  = "sanity"
	LayerCluster = "cluster"
)

// Package is the classname of every case Run reports.
const Package = "dralab-conformance"

// Options of a conformance run.
type Options struct {
	// Manifest is the driver's manifest file (required).
	Manifest string
	// Together are the manifests of more drivers whose devices sit on the
	// same nodes, checked in the same run: each driver's checks run as
	// alone, named cluster/<driver>/<feature> (and sanity/<driver>/...),
	// a check is skipped only when no manifest enables its capability, and
	// the list-attributes check may pair one driver's devices with
	// another's.
	Together []string
	// Kubeconfig is the kubeconfig of the cluster to run on (required): a
	// file, or a list as KUBECONFIG holds one, merged as kubectl merges
	// it; Context its context to use instead of the current one.
	Kubeconfig string
	Context    string
	// Target is the kubeconfig context the caller allows the suite to run
	// on although it is not a lab's (what DRALAB_TARGET says): the suite
	// creates and deletes namespaces, claims and DeviceTaintRules there. A
	// Kubeconfig alone is not that consent.
	Target string
	// Lab tells whether Kubeconfig is a lab's own (target.Request.Lab).
	Lab func(kubeconfig, server string) (dir string, ok bool)
	// Layer is LayerAll, LayerSanity or LayerCluster. Only LayerCluster
	// leaves the sanity layer out of a passing run.
	Layer string
	// Sanity returns the sanity layer's configuration for the cluster
	// Run found: which node, and where its plugin registry and CDI
	// directory are. Nil, or an error wrapping ErrNoNode, means the layer
	// cannot run from here: it is reported not verified, with the reason
	// (a failure unless AllowUnverified).
	Sanity func(ctx context.Context, t *target.Target, client kubernetes.Interface, m *manifest.Manifest) (sanity.Config, error)
	// Cluster tunes the cluster layer (proof image, health command
	// environment).
	Cluster cluster.Options
	// AllowUnverified reports every check that could not be made (the
	// sanity layer without a node, a feature without a device to check it
	// with) as skipped, with a warning in the summary, instead of failed.
	AllowUnverified bool
	// JUnit is the JUnit XML file to write; empty: none.
	JUnit string
	// OnCase is called with each case as its layer ends; nil: nothing.
	OnCase func(results.Case)
}

// ErrNoConsent means Options.Kubeconfig is not a lab's and Options.Target
// does not name its context.
var ErrNoConsent = target.ErrNoConsent

// ErrNoNode means the sanity layer cannot reach a node's plugin sockets
// from where Run runs; the layer is not verified, the error its reason.
var ErrNoNode = errors.New("the sanity layer talks to a node's kubelet plugin sockets")

// Run runs the suite and returns its report; an error means the suite
// could not run (a bad manifest, a cluster it may not use), not that
// checks failed: see Report.Failed.
func Run(ctx context.Context, o Options) (*results.Report, error) {
	m, err := manifest.Load(o.Manifest)
	if err != nil {
		return nil, err
	}
	ms := []*manifest.Manifest{m}
	for _, file := range o.Together {
		other, err := manifest.Load(file)
		if err != nil {
			return nil, err
		}
		for _, seen := range ms {
			if seen.Driver == other.Driver {
				return nil, fmt.Errorf("%s: driver %s has a manifest already: check each driver once", file, other.Driver)
			}
		}
		ms = append(ms, other)
	}
	switch o.Layer {
	case LayerAll, LayerSanity, LayerCluster:
	default:
		return nil, fmt.Errorf("layer %q: want %s, %s or both (empty)", o.Layer, LayerSanity, LayerCluster)
	}
	t, err := resolve(o)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, errors.New("no cluster to run on: give a kubeconfig (dralab's conformance:run starts an embedded lab itself)")
	}
	restConfig, err := t.ClientConfig().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", t.Kubeconfig, err)
	}
	report := &results.Report{Started: time.Now()}
	add := func(cases ...results.Case) {
		for _, c := range cases {
			report.Cases = append(report.Cases, c)
			report.Elapsed += c.Elapsed
			if o.OnCase != nil {
				o.OnCase(c)
			}
		}
	}
	if o.Layer != LayerCluster {
		for _, m := range ms {
			for _, c := range runSanity(ctx, o, t, restConfig, m) {
				if len(ms) > 1 {
					// sanity/<check>, or sanity for the layer as a whole.
					if rest, ok := strings.CutPrefix(c.Name, "sanity/"); ok {
						c.Name = "sanity/" + m.Driver + "/" + rest
					} else {
						c.Name += "/" + m.Driver
					}
				}
				add(c)
			}
		}
	}
	if o.Layer != LayerSanity {
		per := make([][]cluster.Result, len(ms))
		for i, m := range ms {
			co := o.Cluster
			co.AllowUnverified = co.AllowUnverified || o.AllowUnverified
			co.Together = slices.Concat(ms[:i], ms[i+1:])
			per[i] = cluster.Run(ctx, m, restConfig, co)
		}
		add(combine(ms, per)...)
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if o.JUnit != "" {
		var names []string
		for _, file := range append([]string{o.Manifest}, o.Together...) {
			names = append(names, filepath.Base(file))
		}
		if err := writeJUnit(o.JUnit, report, "dralab conformance: "+strings.Join(names, " + ")); err != nil {
			return report, err
		}
	}
	return report, nil
}

// combine turns each manifest's cluster results into cases. One manifest:
// a case per feature, named cluster/<feature>. Several: a case per feature
// and driver that enables it (or must pass it, the core features), named
// cluster/<driver>/<feature>, and a skipped cluster/<feature> for a feature
// that no manifest enables.
func combine(ms []*manifest.Manifest, per [][]cluster.Result) []results.Case {
	several := len(ms) > 1
	var out []results.Case
	// Every manifest runs the same features in the same order.
	for j, first := range per[0] {
		enabled := false
		for i, m := range ms {
			r := per[i][j]
			if several && r.Capability != cluster.CoreCapability && !m.Enabled(manifest.Capability(r.Capability)) {
				continue
			}
			enabled = true
			name := "cluster/" + r.Feature
			if several {
				name = "cluster/" + m.Driver + "/" + r.Feature
			}
			out = append(out, results.Case{
				Package: Package, Name: name, Status: r.Status, Elapsed: r.Elapsed,
				Message: r.Message, Output: strings.Join(r.Log, "\n"),
			})
		}
		if !enabled {
			out = append(out, results.Case{Package: Package, Name: "cluster/" + first.Feature, Status: results.Skipped,
				Message: fmt.Sprintf("no manifest of the run enables %s", first.Capability)})
		}
	}
	return out
}

// runSanity runs layer 1, or reports why it cannot.
func runSanity(ctx context.Context, o Options, t *target.Target, restConfig *rest.Config, m *manifest.Manifest) []results.Case {
	layer := func(status results.Status, msg string) []results.Case {
		return []results.Case{{Package: Package, Name: "sanity", Status: status, Message: msg}}
	}
	notRun := func(reason string) []results.Case {
		return layer(results.Unverified(o.AllowUnverified, "the sanity layer did not run: "+reason+"; to check the cluster layer only, ask for it (--cluster-only)"))
	}
	if o.Sanity == nil {
		return notRun(ErrNoNode.Error() + ": run it on the node (--node), or call drivers/conformance/sanity from the driver's own tests")
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return layer(results.Failed, err.Error())
	}
	cfg, err := o.Sanity(ctx, t, client, m)
	if errors.Is(err, ErrNoNode) {
		return notRun(err.Error())
	}
	if err != nil {
		return layer(results.Failed, "setup: "+err.Error())
	}
	var out []results.Case
	cfg.AllowUnverified = cfg.AllowUnverified || o.AllowUnverified
	for _, r := range sanity.Run(ctx, cfg) {
		c := results.Case{Package: Package, Name: "sanity/" + r.Check, Status: r.Status, Elapsed: r.Elapsed}
		if r.Status == results.Passed {
			c.Output = r.Message
		} else {
			c.Message = r.Message
		}
		out = append(out, c)
	}
	return out
}

func writeJUnit(file string, r *results.Report, suite string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := r.WriteXML(f, suite); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func resolve(o Options) (*target.Target, error) {
	return target.Resolve(target.Request{Kubeconfig: o.Kubeconfig, Context: o.Context, Consent: o.Target, Lab: o.Lab})
}

// Where says where Run would run: the context and server of
// Options.Kubeconfig. It fails, with an error wrapping ErrNoConsent that
// names the context, its server and how to consent, when the kubeconfig is
// not a lab's and Options.Target does not name its context.
func Where(o Options) (string, error) {
	t, err := resolve(o)
	if err != nil {
		return "", err
	}
	return t.String(), nil
}
