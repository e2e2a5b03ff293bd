package lab_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/charts"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab/config"
)

// chartLab has a real node whose GPUs no lab process serves: only its
// labels say what it has, and the driver chart's DaemonSet, running in a
// real container on it, publishes and prepares them.
const chartLab = `apiVersion: lab.dralab.dev/v1alpha1
kind: Lab
name: t-chart
nodes:
- name: real-h100
  kind: real
  labels: {"` + gpu.NodeProfileLabel + `": h100-80gb, "` + gpu.NodeGPUsLabel + `": "2"}
- name: gpu-a100
  gpus: {profile: a100-80gb, count: 2}
- name: gpu-l4
  gpus: {profile: l4-24gb, count: 4}
`

// TestChartOnRealNode installs charts/dralab-driver with the Helm SDK on
// the embedded lab, the driver image imported into the real node's
// containerd as `kind load image-archive` would: the DaemonSet pod
// publishes the node's H100s and prepares claims for real containers, and
// the claims and prioritized-fallback scenarios pass with it.
func TestChartOnRealNode(t *testing.T) {
	bin := binary(t)
	requireRealNodeHost(t)
	ctx := context.Background()
	cfg, err := config.Parse("chart lab", []byte(chartLab))
	if err != nil {
		t.Fatal(err)
	}
	l, restConfig, client := upLab(ctx, t, stateRoot(t), bin, cfg)
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := labstate.Dir(st.StateDir).Node("real-h100")
	defer func() {
		if t.Failed() {
			dir, _ := os.MkdirTemp("", "dralab-chart-logs-")
			if err := l.CollectLogs(ctx, dir); err == nil {
				t.Logf("lab logs: %s", dir)
			}
		}
	}()

	archive, err := build.DriverImage(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := realnode.ImportArchive(ctx, filepath.Dir(bin), realnode.Paths{Node: node}, archive); err != nil {
		t.Fatal(err)
	}
	server, err := url.Parse(restConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(server.Port())
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{
		"image": map[string]any{"repository": build.DriverImageRepository, "tag": build.DriverImageTag, "pullPolicy": "Never"},
		// The lab has no kube-proxy, and its API server listens on the
		// host's loopback only.
		"hostNetwork":   true,
		"apiServer":     map[string]any{"host": server.Hostname(), "port": port},
		"kubeletDir":    node.KubeletRoot(),
		"cdiDir":        node.CDI(),
		"checkpointDir": filepath.Join(string(node), "chart-driver"),
		"nodeSelector":  map[string]any{"kubernetes.io/hostname": "real-h100"},
		// The lab created the classes for its hollow nodes' drivers.
		"deviceClasses": map[string]any{"create": false},
	}
	start := time.Now()
	if err := charts.Install(ctx, l.Kubeconfig(), charts.DriverChart, "dralab-driver", "dralab-system", values); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=real-h100"})
		return err == nil && len(slices.Items) == 1 && len(slices.Items[0].Spec.Devices) == 2, nil
	})
	if err != nil {
		t.Fatalf("the chart's driver never published the real node's 2 GPUs: %v", err)
	}
	t.Logf("chart installed and the real node's slice published in %v", time.Since(start).Round(time.Millisecond))
	pods, err := client.CoreV1().Pods("dralab-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pods.Items {
		got = append(got, p.Name+" on "+p.Spec.NodeName+": "+string(p.Status.Phase))
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "real-h100" || pods.Items[0].Status.Phase != "Running" {
		t.Fatalf("driver pods = %v, want one Running on real-h100", got)
	}

	t.Run("the admission policy keeps the plugin to its own node's slices", func(t *testing.T) {
		sa := "system:serviceaccount:dralab-system:" + pods.Items[0].Spec.ServiceAccountName
		for _, tc := range []struct {
			extra map[string][]string
			want  string
		}{
			{map[string][]string{"authentication.kubernetes.io/node-name": {"real-h100"}}, "a plugin on node real-h100 may only write that node's ResourceSlices"},
			{nil, "the driver's token is not bound to a pod on a node"},
		} {
			impersonated := rest.CopyConfig(restConfig)
			impersonated.Impersonate = rest.ImpersonationConfig{UserName: sa, Extra: tc.extra}
			slice := &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-"},
				Spec: resourceapi.ResourceSliceSpec{
					Driver: gpu.DriverName, NodeName: ptr.To("gpu-a100"),
					Pool: resourceapi.ResourcePool{Name: "gpu-a100", ResourceSliceCount: 1},
				},
			}
			_, err := kubernetes.NewForConfigOrDie(impersonated).ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("forged slice for gpu-a100 as %s %v: err = %v, want denied with %q", sa, tc.extra, err, tc.want)
			}
		}
	})
	t.Run("a real container sees the GPU the chart's driver prepared", func(t *testing.T) {
		logs := runGPUPod(ctx, t, client)
		if !strings.Contains(logs, "GPU_DEVICE_0_PRODUCT=NVIDIA H100 80GB HBM3") {
			t.Errorf("container log lacks the H100:\n%s", logs)
		}
	})
	runScenarios(ctx, t, restConfig, "claims", "prioritized-fallback")
}
