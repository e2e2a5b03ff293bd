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
	"path/filepath"
	"slices"
	"sort"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeadm "k8s.io/kubernetes/cmd/kubeadm/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
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
	run, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "kube: run as one of %v (a link of that name, or its first argument)\n", Names())
		os.Exit(2)
	}
	os.Exit(run(slices.Clone(args)))
}
