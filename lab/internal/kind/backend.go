package kind

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"github.com/dralab/dralab/charts"
	"github.com/dralab/dralab/charts/release"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/internal/backend"
	"github.com/dralab/dralab/lab/internal/kindcmd"
	"github.com/dralab/dralab/lab/status"
)

// DriverNamespace is where the driver's chart is installed.
const DriverNamespace = "dralab-system"

// Backend is the kind backend.
type Backend struct {
	root string
}

// New returns the backend; kubeconfigs live in root/<name>.
func New(root string) *Backend { return &Backend{root: root} }

// Name implements backend.Backend.
func (b *Backend) Name() string { return config.BackendKind }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	return kindcmd.Capabilities
}

// Kubeconfig implements backend.Backend.
func (b *Backend) Kubeconfig(name string) string { return kindcmd.Kubeconfig(b.root, name) }

// provider returns kind's provider on the container engine the lab's
// nodes run on (labEngine) and the clusters it runs.
func (b *Backend) provider(name string) (*cluster.Provider, []string, error) {
	p, _, clusters, err := labEngine(b.root, name)
	return p, clusters, err
}

// Up implements backend.Backend: create the cluster (or reuse it), load the
// driver image into every node, install the driver chart once per GPU
// mode, and wait for the nodes and their GPUs.
func (b *Backend) Up(ctx context.Context, cfg *config.Config, progress ui.Progress) (status.UpResult, error) {
	p, engine, existing, err := labEngine(b.root, cfg.Name)
	if err != nil {
		return status.UpResult{}, err
	}
	kubeconfig := b.Kubeconfig(cfg.Name)
	reused := slices.Contains(existing, cfg.Name)
	if !reused {
		image, note, err := ensureNodeImage(ctx, engine, nodeImage(cfg), cfg.NodeImage == "" || cfg.NodeImage == config.KindNodeImage)
		if err != nil {
			return status.UpResult{}, err
		}
		if note != "" {
			progress(note)(nil)
		}
		cfg.NodeImage = image
		host := DetectHost()
		rendered, err := RenderFor(cfg, host)
		if err != nil {
			return status.UpResult{}, err
		}
		if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o700); err != nil {
			return status.UpResult{}, err
		}
		if engine == "podman" {
			// kind runs podman with this process's environment; the
			// lab's configuration, written before any node is made,
			// fails where podman has no runtime for this host.
			if _, err := host.writePodmanConf(ctx, filepath.Dir(kubeconfig)); err != nil {
				return status.UpResult{}, err
			}
			if err := usePodmanConf(filepath.Dir(kubeconfig)); err != nil {
				return status.UpResult{}, err
			}
		}
		if _, err := prepareHost(ctx, engine, b.root, len(cfg.Nodes)); err != nil {
			return status.UpResult{}, err
		}
		// Recorded like every lab's, so that lab:list and lab:down find it,
		// with the engine its nodes run on, which lab:down and lab:status
		// ask and no other.
		if err := cfg.Record(filepath.Join(filepath.Dir(kubeconfig), "config.json")); err != nil {
			return status.UpResult{}, err
		}
		if err := os.WriteFile(engineFile(b.root, cfg.Name), []byte(engine+"\n"), 0o600); err != nil {
			return status.UpResult{}, fmt.Errorf("recording the lab's engine: %w", err)
		}
		done := progress(fmt.Sprintf("Creating kind cluster %q (%s, %d workers)", cfg.Name, nodeImage(cfg), len(cfg.Nodes)))
		// kind keeps a cluster it failed to create: the lab collects its
		// logs first, then deletes it unless DRALAB_RETAIN asks to keep it
		// (lab.Up), where kind would have deleted it at once.
		err = p.Create(cfg.Name, cluster.CreateWithV1Alpha4Config(rendered), cluster.CreateWithWaitForReady(3*time.Minute),
			cluster.CreateWithKubeconfigPath(kubeconfig), cluster.CreateWithDisplayUsage(false), cluster.CreateWithDisplaySalutation(false),
			cluster.CreateWithRetain(true))
		done(err)
		if err != nil {
			return status.UpResult{}, fmt.Errorf("creating kind cluster %s: %w", cfg.Name, withOutput(err))
		}
	}

	done := progress("Building the driver image and loading it into the nodes")
	err = b.loadDriverImage(ctx, p, cfg.Name)
	done(err)
	if err != nil {
		return status.UpResult{Reused: reused}, err
	}
	for _, r := range nodedrivers.Releases(cfg) {
		done := progress(fmt.Sprintf("Installing the driver chart (release %s) with the Helm SDK", r.Name))
		err := release.Install(ctx, kubeconfig, charts.DriverChart, r.Name, DriverNamespace,
			ChartValues(r, build.DriverImageRepository, build.DriverImageTag))
		done(err)
		if err != nil {
			return status.UpResult{Reused: reused}, err
		}
	}
	done = progress(fmt.Sprintf("Waiting for %d node(s) to be Ready with their devices published", len(cfg.Nodes)))
	err = backend.WaitReady(ctx, kubeconfig, cfg, func(n *v1.Node) string { return n.Labels[LabelLabNode] },
		func(node, component string) string { return logOf(cfg, node, component) })
	done(err)
	return status.UpResult{Reused: reused}, err
}

// logOf names where a kind lab node's component logs: a driver's
// DaemonSet, or the node's kubelet in the logs a failed lab:up collects.
func logOf(cfg *config.Config, node, component string) string {
	if i := slices.IndexFunc(cfg.Nodes, func(n config.Node) bool { return n.Name == node }); i >= 0 {
		if r, ok := nodedrivers.ReleaseOf(cfg, cfg.Nodes[i], component); ok {
			return "kubectl -n " + DriverNamespace + " logs daemonset/" + r.DaemonSet()
		}
	}
	return "the kubelet's journal of its kind node, in the logs lab:up collects when it fails"
}

func (b *Backend) loadDriverImage(ctx context.Context, p *cluster.Provider, name string) error {
	dir, err := os.MkdirTemp("", "dralab-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	archive, err := build.DriverImage(ctx, dir)
	if err != nil {
		return err
	}
	nodes, err := p.ListInternalNodes(name)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		f, err := os.Open(archive)
		if err != nil {
			return err
		}
		err = nodeutils.LoadImageArchive(n, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("loading the driver image into node %s: %w", n.String(), err)
		}
	}
	return nil
}

// Down implements backend.Backend.
func (b *Backend) Down(ctx context.Context, name string) error {
	p, engine, _, err := labEngine(b.root, name)
	if err != nil {
		return err
	}
	if err := p.Delete(name, b.Kubeconfig(name)); err != nil {
		return err
	}
	left, err := p.List()
	if err != nil {
		return err
	}
	if err := releaseHost(ctx, b.root, engine, len(left)); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Dir(b.Kubeconfig(name)))
}

// Status implements backend.Backend.
func (b *Backend) Status(ctx context.Context, name string) (*status.Status, error) {
	st := &status.Status{Name: name, Backend: b.Name(), Phase: status.PhaseAbsent, Kubeconfig: b.Kubeconfig(name), StateDir: filepath.Dir(b.Kubeconfig(name))}
	_, clusters, err := b.provider(name)
	if err != nil {
		st.Message = err.Error()
		if recordedEngine(b.root, name) != "" {
			// Its nodes may run, on an engine that does not answer.
			st.Phase = status.PhaseFailed
		}
		return st, nil
	}
	if !slices.Contains(clusters, name) {
		return st, nil
	}
	st.Phase = status.PhaseRunning
	restConfig, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		st.Phase, st.Message = status.PhaseDegraded, err.Error()
		return st, nil
	}
	st.APIServer = restConfig.Host
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		st.Phase, st.Message = status.PhaseDegraded, "the API server does not answer: "+err.Error()
		return st, nil
	}
	// What each node carries and which DaemonSets serve it, as the lab's
	// recorded configuration says.
	cfg, err := config.Load(filepath.Join(st.StateDir, "config.json"))
	if err != nil {
		st.Phase, st.Message = status.PhaseDegraded, "the lab's recorded configuration: "+err.Error()
		cfg = &config.Config{}
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		labNode := n.Labels[LabelLabNode]
		if labNode == "" {
			continue
		}
		ns := status.NodeStatus{Name: labNode, ClusterNode: n.Name, Process: "kind node " + n.Name, Ready: backend.NodeReady(n), Healthy: backend.NodeReady(n) == string(v1.ConditionTrue)}
		if j := slices.IndexFunc(cfg.Nodes, func(c config.Node) bool { return c.Name == labNode }); j >= 0 {
			ns.Profile, ns.Driver = describe(cfg, cfg.Nodes[j])
		}
		if !ns.Healthy {
			st.Phase = status.PhaseDegraded
		}
		st.Nodes = append(st.Nodes, ns)
	}
	return st, nil
}

// describe says what a kind lab's node carries and the DaemonSets that
// run its drivers.
func describe(cfg *config.Config, n config.Node) (profile, driver string) {
	var profiles, daemonSets []string
	for _, k := range nodedrivers.Of(cfg, n) {
		profiles = append(profiles, k.Describe(cfg, n))
		if r, ok := nodedrivers.ReleaseOf(cfg, n, k.Role()); ok {
			daemonSets = append(daemonSets, "DaemonSet "+DriverNamespace+"/"+r.DaemonSet())
		}
	}
	return strings.Join(profiles, ", "), strings.Join(daemonSets, "; ")
}

// CollectLogs implements backend.Backend with kind's own log export.
func (b *Backend) CollectLogs(ctx context.Context, name, dir string) error {
	p, _, err := b.provider(name)
	if err != nil {
		return err
	}
	return p.CollectLogs(name, dir)
}
