// Command kube is Kubernetes' own commands in one binary, for the node
// image of a kind lab that the lab builds without a registry: the node's
// kubelet, kubeadm and kubectl, and the control plane's static pods and
// kube-proxy, all the Kubernetes the embedded lab runs (one binary links
// the code they share once, where eight would each link it again). It runs
// the command it is named for: a link named kubelet is the kubelet, and
// `kube kubelet …` is too.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeadm "k8s.io/kubernetes/cmd/kubeadm/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	"github.com/dralab/dralab/lab/internal/kind/nodeimage/podnet"
)

// commands are the commands kube runs, by the name each is installed as.
var commands = map[string]func(args []string) int{
	"kube-apiserver":          cobraMain(apiserver.NewAPIServerCommand),
	"kube-controller-manager": cobraMain(controllermanager.NewControllerManagerCommand),
	"kube-scheduler":          cobraMain(func() *cobra.Command { return scheduler.NewSchedulerCommand() }),
	"kube-proxy":              cobraMain(proxy.NewProxyCommand),
	"kubelet":                 cobraMain(func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) }),
	"kubectl": func(args []string) int {
		c := kubectl.NewDefaultKubectlCommand()
		c.SetArgs(args)
		if err := cli.RunNoErrOutput(c); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			return 1
		}
		return 0
	},
	"kubeadm": func(args []string) int {
		os.Args = append([]string{"kubeadm"}, args...)
		if err := kubeadm.Run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	},
	"etcd": func(args []string) int {
		etcdmain.Main(append([]string{"etcd"}, args...))
		return 0
	},
}

// podnetCommand keeps the node's pod network (podnet), as a unit of the
// node image: the lab's, not one of Kubernetes' commands.
const podnetCommand = "dralab-podnet"

// runPodnet runs the node's pod network agent with the kubelet's
// credentials, once kubeadm has written them, until it is stopped.
func runPodnet([]string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	node, err := os.Hostname()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dralab-podnet:", err)
		return 1
	}
	for {
		if _, err := os.Stat(podnet.Kubeconfig); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(time.Second):
		}
	}
	// kubeadm init writes the administrator's kubeconfig with the
	// kubelet's: on the control plane's node the agent is the
	// administrator, and lets every node's agent read the nodes.
	kubeconfig, admin := podnet.Kubeconfig, false
	if _, err := os.Stat(podnet.AdminKubeconfig); err == nil {
		kubeconfig, admin = podnet.AdminKubeconfig, true
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dralab-podnet:", err)
		return 1
	}
	cfg.UserAgent = podnetCommand
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dralab-podnet:", err)
		return 1
	}
	logger := klog.Background().WithValues("node", node)
	for admin {
		// Until the API server answers and kubeadm has bound the
		// administrator's group.
		err := podnet.EnsureRBAC(ctx, client)
		if err == nil {
			break
		}
		logger.Info("Letting the nodes read the nodes; trying again", "err", err)
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(2 * time.Second):
		}
	}
	a := &podnet.Agent{Node: node, ConfFile: podnet.ConfFile, Router: podnet.Netlink{}}
	if err := a.Run(klog.NewContext(ctx, logger), client); err != nil {
		fmt.Fprintln(os.Stderr, "dralab-podnet:", err)
		return 1
	}
	return 0
}

// cobraMain runs a component's cobra command with args, as its own main
// does.
func cobraMain(newCommand func() *cobra.Command) func(args []string) int {
	return func(args []string) int {
		c := newCommand()
		c.SetArgs(args)
		return cli.Run(c)
	}
}

// Names are the names kube answers to, which the node image links to it.
func Names() []string {
	var out []string
	for name := range commands {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if _, ok := commands[name]; !ok && len(args) > 0 {
		name, args = args[0], args[1:]
	}
	if name == podnetCommand {
		os.Exit(runPodnet(args))
	}
	run, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "kube: run as one of %v (a link of that name, or its first argument)\n", Names())
		os.Exit(2)
	}
	os.Exit(run(slices.Clone(args)))
}
