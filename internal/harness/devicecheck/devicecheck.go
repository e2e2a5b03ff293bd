// Package devicecheck is `go run mage.go device:check`: on a machine with an
// NVIDIA GPU, the whole path from NVML to a prepared claim, in one command.
// It enumerates the GPUs through NVML, brings up an embedded lab with two
// nodes whose GPU drivers read them, one through DRA and one counting
// through its device plugin, allocates a claim selecting the first GPU's
// product, waits until the driver has prepared it for a pod, prints the
// node's ResourceSlice and the claim's CDI spec, then runs a pod counting
// one GPU and checks what the device plugin gives a container (its device
// files, NVIDIA_VISIBLE_DEVICES). With a mock NVML (CI, machines without a
// GPU) it runs the same path.
package devicecheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/nvml"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/lab/config"
)

// Options of a device check.
type Options struct {
	// NVML is the driver's NVML source: "host" (the machine's library) or
	// "mock:<server>".
	NVML string
	// Out receives the report.
	Out io.Writer
	// Timeout bounds the whole check.
	Timeout time.Duration
}

// The lab's nodes: node serves the GPUs through DRA, countedNode counts
// them through the driver's device plugin (nvidia.com/gpu's world).
const (
	node        = "gpu-node"
	countedNode = "gpu-node-counted"
)

// Run runs the check.
func Run(ctx context.Context, o Options) error {
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	bin, err := build.Dralab(ctx)
	if err != nil {
		return err
	}
	// The driver enumerates, as it will in the lab: NVML is cgo, and only
	// the driver binary links it.
	driver := filepath.Join(filepath.Dir(bin), build.DriverBinary)
	devs, err := list(ctx, driver, o.NVML, node)
	if err != nil {
		return fmt.Errorf("device check: %w", err)
	}
	fmt.Fprintf(o.Out, "NVML (%s) reports %d GPU(s):\n", o.NVML, len(devs))
	for _, d := range devs {
		a := d.Attributes
		fmt.Fprintf(o.Out, "  %s  %s  %s  %s\n", d.Name, str(a["productName"]), str(a["uuid"]), str(a["resource.kubernetes.io/pciBusID"]))
	}
	product := str(devs[0].Attributes["productName"])
	// The counting node's GPUs, as its driver lists them: a mock names
	// its GPUs' UUIDs after their node.
	counted, err := list(ctx, driver, o.NVML, countedNode)
	if err != nil {
		return fmt.Errorf("device check: %w", err)
	}
	uuids := map[string]string{}
	for _, d := range counted {
		uuids[d.Name] = str(d.Attributes["uuid"])
	}

	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Nodes: []config.Node{
		{Name: node, GPUs: &config.GPUs{NVML: o.NVML}},
		{Name: countedNode, GPUs: &config.GPUs{NVML: o.NVML, Mode: config.GPUModeDevicePlugin}},
	}}
	if err := cfg.Complete(); err != nil {
		return err
	}
	start := time.Now()
	l, err := scratchlab.Start(ctx, cfg, "dralab-device-check")
	defer func() { _ = scratchlab.Stop(context.WithoutCancel(ctx), l) }()
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "Lab up with the NVML driver on node %s in %v\n", node, time.Since(start).Round(time.Millisecond))
	client, err := kubeclient.New(l.Kubeconfig())
	if err != nil {
		return err
	}
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err
	}
	for _, s := range slices.Items {
		s.ManagedFields = nil
		if err := printYAML(o.Out, "ResourceSlice "+s.Name, s); err != nil {
			return err
		}
	}

	claim, err := prepareClaim(ctx, client, product)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "Claim %s allocated %s/%s (%s) and prepared for pod gpu-check\n", claim.Name,
		claim.Status.Allocation.Devices.Results[0].Pool, claim.Status.Allocation.Devices.Results[0].Device, product)
	st, err := l.Status(ctx)
	if err != nil {
		return err
	}
	cdiDir := ""
	for _, n := range st.Nodes {
		if n.Name == node {
			cdiDir = n.CDIDir
		}
	}
	if cdiDir == "" {
		return fmt.Errorf("device check: lab %s does not say where node %s's CDI specs are", l.Config().Name, node)
	}
	specs, err := filepath.Glob(filepath.Join(cdiDir, "*"))
	if err != nil {
		return err
	}
	for _, f := range specs {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "--- CDI spec %s\n%s\n", filepath.Base(f), data)
	}
	if len(specs) == 0 {
		return fmt.Errorf("device check: the driver wrote no CDI spec for claim %s", claim.Name)
	}
	if err := checkCounted(ctx, client, st, uuids, o); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "Device check passed in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// prepareClaim runs a pod whose claim selects the product, and returns the
// claim once the pod runs: the kubelet has had the driver prepare it.
func prepareClaim(ctx context.Context, client kubernetes.Interface, product string) (*resourceapi.ResourceClaim, error) {
	sel := fmt.Sprintf("device.attributes[%q].productName == %q", gpu.DriverName, product)
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-check", Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpu.ClassAny,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: sel}}}},
		}}}},
	}
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-check", Namespace: "default"},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []v1.Container{{Name: "main", Image: "busybox",
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gpu-check")}},
		},
	}
	if _, err := runPod(ctx, client, pod, fmt.Sprintf("a claim for %q", product)); err != nil {
		return nil, err
	}
	return client.ResourceV1().ResourceClaims("default").Get(ctx, "gpu-check", metav1.GetOptions{})
}

// runPod creates pod and returns it once it runs; what says what it asks
// for, in the error when it does not run.
func runPod(ctx context.Context, client kubernetes.Interface, pod *v1.Pod, what string) (*v1.Pod, error) {
	if _, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	var last *v1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return p.Status.Phase == v1.PodRunning, nil
	})
	if err != nil {
		state := "not created"
		if last != nil {
			state = fmt.Sprintf("%s %v", last.Status.Phase, last.Status.Conditions)
		}
		return nil, fmt.Errorf("device check: pod %s with %s did not run: %w (%s)", pod.Name, what, err, state)
	}
	return last, nil
}

// list runs the driver's --list: the devices it would publish on a node.
func list(ctx context.Context, driver, source, node string) ([]resourceapi.Device, error) {
	source = nvml.SourceOf(source)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, driver, "--list", "--inventory=nvml", "--nvml="+source, "--node-name="+node)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(strings.TrimPrefix(stderr.String(), build.DriverBinary+": ")); msg != "" {
			return nil, errors.New(msg)
		}
		return nil, fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	var devs []resourceapi.Device
	if err := yaml.UnmarshalStrict(stdout.Bytes(), &devs); err != nil {
		return nil, fmt.Errorf("reading %s --list: %w", driver, err)
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("NVML (%s) reports no GPU", source)
	}
	return devs, nil
}

func str(a resourceapi.DeviceAttribute) string {
	if a.StringValue != nil {
		return *a.StringValue
	}
	return "-"
}

func printYAML(w io.Writer, title string, obj any) error {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "--- %s\n%s", title, data)
	return err
}
