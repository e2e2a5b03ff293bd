package devicecheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/nvml"
	"github.com/dralab/dralab/lab"
)

// gpuFile is a GPU's own device file.
var gpuFile = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// checkCounted runs a pod that counts one GPU (dralab.dev/gpu: 1) on the
// counting node, which its kubelet advertises from the driver's device
// plugin, then asks that device plugin, over its socket as a kubelet does,
// for the first healthy GPU it lists, and checks the answer: the GPU's
// device file and the driver's control files, and NVIDIA_VISIBLE_DEVICES
// naming it. (A hollow node's kubelet counts but does not call Allocate;
// a real kubelet gets this answer.) A mock's GPUs have no device files; on
// a GPU machine every one given must be a character device of this host.
// uuids are the GPUs' UUIDs by device name.
func checkCounted(ctx context.Context, client kubernetes.Interface, st *lab.Status, uuids map[string]string, o Options) error {
	var dir string
	for _, n := range st.Nodes {
		if n.Name == countedNode {
			dir = n.DevicePluginsDir
		}
	}
	if dir == "" {
		return fmt.Errorf("device check: lab %s does not say where node %s's kubelet serves device plugins", st.Name, countedNode)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-count", Namespace: "default"},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []v1.Container{{Name: "main", Image: "busybox", Resources: v1.ResourceRequirements{
				Limits: v1.ResourceList{gpu.ExtendedResource: resource.MustParse("1")}}}},
		},
	}
	p, err := runPod(ctx, client, pod, "a counted GPU ("+gpu.ExtendedResource+": 1)")
	if err != nil {
		return err
	}
	id, resp, err := allocate(ctx, dir)
	if err != nil {
		return fmt.Errorf("device check: node %s's device plugin: %w", countedNode, err)
	}
	var files []string
	for _, d := range resp.Devices {
		files = append(files, d.ContainerPath)
	}
	fmt.Fprintf(o.Out, "Pod gpu-count counted a GPU on node %s; for %s its device plugin gives device files [%s] and %s=%s\n",
		p.Spec.NodeName, id, strings.Join(files, " "), nvml.VisibleDevicesEnv, resp.Envs[nvml.VisibleDevicesEnv])
	if p.Spec.NodeName != countedNode {
		return fmt.Errorf("device check: pod gpu-count counted a GPU on node %s, want %s", p.Spec.NodeName, countedNode)
	}
	return checkAllocation(id, resp, uuids, strings.HasPrefix(o.NVML, nvml.MockPrefix))
}

// allocate finds the device plugin's socket in the kubelet's device-plugin
// directory (the one socket there but the kubelet's), takes the first
// healthy device of its ListAndWatch, and has the plugin Allocate it for
// one container.
func allocate(ctx context.Context, dir string) (string, *pluginapi.ContainerAllocateResponse, error) {
	socks, err := filepath.Glob(filepath.Join(dir, "*.sock"))
	if err != nil {
		return "", nil, err
	}
	socks = slices.DeleteFunc(socks, func(s string) bool { return filepath.Base(s) == "kubelet.sock" })
	if len(socks) != 1 {
		return "", nil, fmt.Errorf("want one plugin socket in %s, found %v", dir, socks)
	}
	conn, err := grpc.NewClient("unix://"+socks[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", nil, err
	}
	defer conn.Close()
	plugin := pluginapi.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := plugin.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return "", nil, err
	}
	list, err := stream.Recv()
	if err != nil {
		return "", nil, fmt.Errorf("ListAndWatch: %w", err)
	}
	i := slices.IndexFunc(list.Devices, func(d *pluginapi.Device) bool { return d.Health == pluginapi.Healthy })
	if i < 0 {
		return "", nil, fmt.Errorf("ListAndWatch lists no healthy device: %v", list.Devices)
	}
	id := list.Devices[i].ID
	resp, err := plugin.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{id}}}})
	if err != nil {
		return "", nil, fmt.Errorf("Allocate %s: %w", id, err)
	}
	if len(resp.ContainerResponses) != 1 {
		return "", nil, fmt.Errorf("Allocate %s answered for %d containers, want 1", id, len(resp.ContainerResponses))
	}
	return id, resp.ContainerResponses[0], nil
}

// checkAllocation checks the device plugin's answer for the GPU id:
// NVIDIA_VISIBLE_DEVICES names its UUID; a mock's GPU gets no device
// files; a real one gets its own and the control files, each a character
// device of this host.
func checkAllocation(id string, resp *pluginapi.ContainerAllocateResponse, uuids map[string]string, mock bool) error {
	if got, want := resp.Envs[nvml.VisibleDevicesEnv], uuids[id]; want == "" || got != want {
		return fmt.Errorf("device check: the device plugin gave %s=%q for %s, want its UUID %q", nvml.VisibleDevicesEnv, got, id, want)
	}
	var own, others []string
	for _, d := range resp.Devices {
		if gpuFile.MatchString(d.ContainerPath) {
			own = append(own, d.ContainerPath)
		} else {
			others = append(others, d.ContainerPath)
		}
		if mock {
			continue
		}
		if fi, err := os.Stat(d.HostPath); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			return fmt.Errorf("device check: the device plugin gave %s from %s, which is not a character device on this host (%v)", d.ContainerPath, d.HostPath, err)
		}
	}
	switch {
	case mock && len(resp.Devices) > 0:
		return fmt.Errorf("device check: the device plugin gave a mock's GPU device files %v", append(own, others...))
	case !mock && (len(own) != 1 || !slices.Contains(others, "/dev/nvidiactl")):
		return fmt.Errorf("device check: the device plugin gave the counted GPU device files %v and %v, want its own /dev/nvidiaN and the control files (/dev/nvidiactl, …)", own, others)
	}
	return nil
}
