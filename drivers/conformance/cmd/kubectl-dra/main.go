// Command kubectl-dra is a kubectl plugin that reads a cluster's Dynamic
// Resource Allocation state as the allocator does and explains it:
//
//	go install github.com/dralab/dralab/drivers/conformance/cmd/kubectl-dra@latest
//	kubectl dra why my-pod             # request → subrequest → candidates per node → what blocks each
//	kubectl dra why claim/my-claim     # or podgroup/my-group
//	kubectl dra devices                # every device, its holder and chosen subrequest, or why it is not free
//	kubectl dra claims -A              # every claim, its allocation and whom it is reserved for
//
// It loads the kubeconfig as kubectl does (--kubeconfig, else $KUBECONFIG,
// else ~/.kube/config; --context; -n, else the context's namespace; -A),
// prints -o table (the default), wide, json or yaml, and only reads: the
// ClusterRole it needs is clusterrole.yaml beside this file. Its reading
// and explanations are those of the allocation package, which dralab's
// scenarios, dashboard and reports use too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/drivers/conformance/allocation"
)

// memoryLimit is the heap kubectl dra keeps to where it can, unless
// GOMEMLIMIT says otherwise: a cluster of 5,000 nodes and 20,000 pods reads
// as about 250 MiB (280 MiB with 120,000 partitioned devices), and the
// collector's default room (as much again) would double that. Closer to
// what the reading holds, the collector runs ever more often: at 384 MiB
// it took a third of the partitioned cluster's answer; at 416 MiB the
// answer's peak RSS stays under 450 MiB.
const memoryLimit = 416 << 20

func main() {
	os.Exit(command())
}

// command runs the command line this process was started with, and says
// its exit code.
func command() int {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, os.Args[1:], os.Stdout, os.Stderr, connect)
}

// options are the command line's flags.
type options struct {
	kubeconfig, context, namespace string
	allNamespaces                  bool
	output                         string
	node                           string
	featureGates                   string
}

// connector makes the client of the cluster the options name, and says
// the namespace to read (the context's where -n names none).
type connector func(o *options) (kubernetes.Interface, string, error)

const usage = `kubectl dra: why a pod, claim or gang waits, and what holds each device.

Usage:
  kubectl dra why (POD | pod/NAME | claim/NAME | podgroup/NAME) [flags]
  kubectl dra devices [--node NAME] [flags]
  kubectl dra claims [flags]

Flags:
`

// run is the command without the process around it: it returns the exit
// code (1: an error, 2: a bad command line).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, connect connector) int {
	fs := flag.NewFlagSet("kubectl-dra", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "the kubeconfig file (default $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&o.context, "context", "", "the kubeconfig context (default: its current context)")
	fs.StringVar(&o.namespace, "namespace", "", "the namespace (default: the context's)")
	fs.StringVar(&o.namespace, "n", "", "the namespace (short for --namespace)")
	fs.BoolVar(&o.allNamespaces, "all-namespaces", false, "every namespace")
	fs.BoolVar(&o.allNamespaces, "A", false, "every namespace (short for --all-namespaces)")
	fs.StringVar(&o.output, "output", "table", "table, wide, json or yaml")
	fs.StringVar(&o.output, "o", "table", "the output (short for --output)")
	fs.StringVar(&o.node, "node", "", "devices: only this node's")
	fs.StringVar(&o.featureGates, "feature-gates", "", "the allocator's DRA gates where they differ from the API server's (Gate=true,Gate=false)")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	// Flags may follow the verb and its argument, as kubectl's do.
	var words []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		words = append(words, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(words) == 0 {
		fs.Usage()
		return 2
	}
	if !validOutput(o.output) {
		fmt.Fprintf(stderr, "kubectl dra: --output %q: want table, wide, json or yaml\n", o.output)
		return 2
	}
	verb, operands := words[0], words[1:]
	want := map[string]int{"why": 1, "devices": 0, "claims": 0}
	n, known := want[verb]
	switch {
	case !known:
		fmt.Fprintf(stderr, "kubectl dra: unknown command %q: want why, devices or claims\n", verb)
		return 2
	case len(operands) != n:
		fmt.Fprintf(stderr, "kubectl dra %s: takes %d argument(s), got %d: %s\n", verb, n, len(operands), strings.Join(operands, " "))
		return 2
	}

	gates, err := parseGates(o.featureGates)
	if err != nil {
		fmt.Fprintln(stderr, "kubectl dra: --feature-gates:", err)
		return 2
	}
	client, namespace, err := connect(&o)
	if err != nil {
		fmt.Fprintln(stderr, "kubectl dra:", err)
		return 1
	}
	if o.allNamespaces {
		namespace = ""
	}
	r := reader{client: client, namespace: namespace, output: o.output, stdout: stdout, stderr: stderr, gates: gates}
	switch verb {
	case "why":
		err = r.why(ctx, operands[0])
	case "devices":
		err = r.devices(ctx, o.node)
	case "claims":
		err = r.claims(ctx)
	}
	if err != nil {
		fmt.Fprintln(stderr, "kubectl dra:", explain(err))
		return 1
	}
	return 0
}

// parseGates reads Gate=true,Gate=false, of the gates that switch the
// allocator's features.
func parseGates(s string) (map[string]bool, error) {
	if s == "" {
		return nil, nil
	}
	gates := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(kv), "=")
		on, err := strconv.ParseBool(value)
		if !ok || name == "" || err != nil {
			return nil, fmt.Errorf("%q: want Gate=true or Gate=false", kv)
		}
		gates[name] = on
	}
	if _, err := allocation.WithGates(allocation.DefaultFeatures, gates); err != nil {
		return nil, err
	}
	return gates, nil
}

func validOutput(o string) bool {
	switch o {
	case "table", "wide", "json", "yaml":
		return true
	}
	return false
}

// explain adds what to do to an error the user can act on.
func explain(err error) string {
	if apierrors.IsForbidden(err) {
		return err.Error() + "\nkubectl dra only reads: bind the ClusterRole of drivers/conformance/cmd/kubectl-dra/clusterrole.yaml (get and list on pods, nodes, resource.k8s.io and scheduling.k8s.io's objects) to your user"
	}
	return err.Error()
}

// connect loads the kubeconfig as kubectl does.
func connect(o *options) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.context}
	overrides.Context.Namespace = o.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	namespace, _, err := cc.Namespace()
	if err != nil {
		return nil, "", err
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	rc.UserAgent = "kubectl-dra"
	// Protobuf, as kubectl's own clients ask for built-in types: a large
	// cluster's pods decode several times faster than from JSON.
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	// A large cluster's lists are many pages.
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", err
	}
	return client, namespace, nil
}
