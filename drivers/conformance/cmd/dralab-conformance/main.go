// Command dralab-conformance runs dralab's DRA driver conformance suite for
// the driver a manifest describes, from a driver's own CI:
//
//	go install github.com/dralab/dralab/drivers/conformance/cmd/dralab-conformance@latest
//	DRALAB_TARGET="kind-kind@$(kubectl config view --minify --context kind-kind -o jsonpath='{.clusters[0].cluster.server}')" \
//	  dralab-conformance --manifest driver.yaml --cluster-only --junit junit.xml
//
// The cluster layer runs on the cluster of the kubeconfig kubectl would use
// (--kubeconfig, else $KUBECONFIG, else ~/.kube/config; --context picks
// another context), and only when --target (default $DRALAB_TARGET) names
// its context and server (context@server): the suite creates and deletes namespaces, claims, pods and
// DeviceTaintRules there. The sanity layer talks to one node's kubelet
// plugin sockets: it runs when --node names the node and this process can
// reach its --registrar-dir and --cdi-dir (run it on the node); its restart
// check runs --restart-command. A pass
// means every check the manifest enables was verified: the sanity layer
// not run, or a feature with nothing to check it on, fails, unless
// --cluster-only leaves the sanity layer out or --allow-unverified turns
// such failures into warnings. It prints each check as it ends and a
// summary, writes JUnit XML with --junit and an HTML page with --html, and
// exits 1 when a check fails, 2 when the suite cannot run, or when the
// cluster kept a check's pods off every node its claims fit (a taint they
// do not tolerate, their node selection: --toleration and the manifest's
// proofPod give them what the cluster asks). --manifest may
// be repeated, to check drivers whose devices share nodes (a GPU and a NIC
// driver) in one run: each driver's checks are named after it, and a check
// is skipped only when no manifest enables it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/podresources"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/drivers/conformance/target"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command without the process around it: it returns the exit
// code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dralab-conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o            conformance.Options
		node         = fs.String("node", "", "the node whose kubelet plugin the sanity layer checks; empty: the sanity layer cannot run, which fails the run unless --cluster-only")
		restartCmd   = fs.String("restart-command", "", "a shell command that restarts the driver of --node, for the sanity layer's restart check (e.g. kubectl -n my-driver delete pod -l app=my-driver --field-selector spec.nodeName=worker-1); without it that check is not verified")
		clusterOnly  = fs.Bool("cluster-only", false, "run the cluster layer only (the same as --layer cluster): a pass then says nothing of the kubelet plugin")
		registrarDir = fs.String("registrar-dir", "/var/lib/kubelet/plugins_registry", "the node's kubelet plugin registry, as this process sees it (sanity layer)")
		cdiDir       = fs.String("cdi-dir", "/var/run/cdi", "the node's CDI spec directory, as this process sees it (sanity layer)")
		podResources = fs.String("podresources-socket", "", "the kubelet podresources socket of --node, as this process sees it (e.g. "+podresources.DefaultSocket+"): the KubeletPodResourcesDynamicResources check reads it, its pod on --node; without it that check is not verified")
	)
	var manifests manifestFiles
	fs.Var(&manifests, "manifest", "the driver's conformance manifest (required); repeat it to check drivers whose devices share nodes in one run (a check is then skipped only when no manifest enables it)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "the kubeconfig of the cluster to run on (default $KUBECONFIG, else ~/.kube/config, as kubectl)")
	fs.StringVar(&o.Context, "context", "", "the kubeconfig context to use (default: its current context)")
	fs.StringVar(&o.Target, "target", os.Getenv(target.EnvConsent), "the context the suite may create and delete objects in (default $"+target.EnvConsent+")")
	fs.StringVar(&o.Layer, "layer", conformance.LayerAll, "run one layer only: sanity or cluster")
	fs.BoolVar(&o.AllowUnverified, "allow-unverified", false, "report checks that could not be made (no node for the sanity layer, no device to check a capability on) as skipped with a warning, not failed")
	fs.StringVar(&o.JUnit, "junit", "", "write JUnit XML to this file")
	html := fs.String("html", "", "write the run's HTML page (a row per check) to this file")
	fs.StringVar(&o.Cluster.Image, "image", "", "image of the proof containers, with sh and env (default busybox:1.37)")
	fs.Func("toleration", "a toleration of every pod the suite creates, in kubectl's taint syntax: KEY=VALUE:EFFECT, KEY:EFFECT (any value), KEY=VALUE (any effect) or KEY; repeat it for several (the manifest's proofPod adds its own)", func(v string) error {
		t, err := manifest.ParseToleration(v)
		if err != nil {
			return err
		}
		o.Cluster.Tolerations = append(o.Cluster.Tolerations, t)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: dralab-conformance --manifest driver.yaml [--manifest other-driver.yaml ...] [--kubeconfig file] [--context name] [--target context] [--node name [--restart-command cmd] [--podresources-socket path] | --cluster-only] [--toleration KEY=VALUE:EFFECT ...] [--allow-unverified] [--junit file] [--html file]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dralab-conformance: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if len(manifests) == 0 {
		fmt.Fprintln(stderr, "dralab-conformance: --manifest is required")
		return 2
	}
	o.Manifest, o.Together = manifests[0], manifests[1:]
	if *clusterOnly {
		if o.Layer != conformance.LayerAll && o.Layer != conformance.LayerCluster {
			fmt.Fprintf(stderr, "dralab-conformance: --cluster-only and --layer %s ask for different layers\n", o.Layer)
			return 2
		}
		o.Layer = conformance.LayerCluster
	}
	if o.Kubeconfig == "" {
		o.Kubeconfig = target.DefaultKubeconfig()
	}
	for _, file := range manifests {
		if _, err := manifest.Load(file); err != nil {
			fmt.Fprintln(stderr, "dralab-conformance:", err)
			return 2
		}
	}
	if *node != "" {
		o.Sanity = func(_ context.Context, _ *target.Target, client kubernetes.Interface, m *manifest.Manifest) (sanity.Config, error) {
			// In the order of the flags' help, so one run always names the same one first.
			for _, d := range []struct{ flag, dir string }{{"--registrar-dir", *registrarDir}, {"--cdi-dir", *cdiDir}} {
				if _, err := os.Stat(d.dir); err != nil {
					return sanity.Config{}, fmt.Errorf("%w of node %s: %s %v", conformance.ErrNoNode, *node, d.flag, err)
				}
			}
			cfg := sanity.Config{Manifest: m, Client: client, NodeName: *node, RegistrarDir: *registrarDir, CDIDir: *cdiDir}
			if *restartCmd != "" {
				cfg.Restart = func(ctx context.Context) error {
					if out, err := exec.CommandContext(ctx, "sh", "-c", *restartCmd).CombinedOutput(); err != nil {
						return fmt.Errorf("--restart-command %q: %w: %s", *restartCmd, err, out)
					}
					return nil
				}
			}
			return cfg, nil
		}
	}
	if *podResources != "" {
		if *node == "" {
			fmt.Fprintln(stderr, "dralab-conformance: --podresources-socket is the socket of --node: give --node too")
			return 2
		}
		o.Cluster.PodResourcesNodes = []string{*node}
		o.Cluster.PodResources = func(ctx context.Context, n string) (*podresourcesapi.ListPodResourcesResponse, error) {
			if n != *node {
				return nil, fmt.Errorf("--podresources-socket reads node %s, not %s", *node, n)
			}
			return podresources.List(ctx, *podResources)
		}
	}
	where, err := conformance.Where(o)
	if err == nil && o.Kubeconfig == "" {
		err = errors.New("no cluster: no --kubeconfig, no KUBECONFIG and no ~/.kube/config")
	}
	if err != nil {
		fmt.Fprintln(stderr, "dralab-conformance:", err)
		return 2
	}
	fmt.Fprintln(stderr, "Target:", where)
	o.OnCase = func(c results.Case) {
		fmt.Fprintf(stderr, "%s %s (%s)\n", c.Status, c.Name, c.Elapsed.Round(100*time.Millisecond))
	}
	report, err := conformance.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "dralab-conformance:", err)
		return 2
	}
	fmt.Fprint(stdout, report.Summary())
	if o.JUnit != "" {
		fmt.Fprintln(stdout, "JUnit:", o.JUnit)
	}
	if *html != "" {
		if err := report.WriteHTMLFile(*html, "dralab conformance: "+strings.Join(manifests, " + "), nil); err != nil {
			fmt.Fprintln(stderr, "dralab-conformance:", err)
			return 2
		}
		fmt.Fprintln(stdout, "Report:", *html)
	}
	if report.Failed() {
		return 1
	}
	if n := report.KeptOff(); n > 0 {
		fmt.Fprintf(stderr, "dralab-conformance: %d checks not verified: the cluster kept their pods off every node their claims fit (each says by what); give the suite's pods what the cluster asks (--toleration, the manifest's proofPod)\n", n)
		return 2
	}
	return 0
}

// manifestFiles collects --manifest, which may be repeated.
type manifestFiles []string

func (m *manifestFiles) String() string { return strings.Join(*m, ",") }

func (m *manifestFiles) Set(file string) error {
	*m = append(*m, file)
	return nil
}
