package lab_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/nicapp"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/mounts"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/scenarios"
)

// TestRealNode brings up lab/examples/real-node.yaml: the real kubelet
// with containerd and runc. A pod with an H100 claim runs in a real
// container whose environment shows its GPU; the claims and
// prioritized-fallback scenarios pass with the real node in the cluster;
// a killed containerd is reported and explained; and after Down nothing of
// the lab remains on the host.
func TestRealNode(t *testing.T) {
	bin := binary(t)
	requireRealNodeHost(t)
	ctx := context.Background()
	root := stateRoot(t)
	// Things on the host the lab did not create, which lab:down must leave:
	// a cgroup under another kubelet's kubepods, an iptables chain made
	// while the lab ran, the kubelet's host paths as they were.
	decoyCgroup := decoyKubepods(t)
	hostPathsBefore := existing(realnode.KubeletHostPaths)
	chainsBefore := realnode.IptablesChains(ctx)
	savedBefore := iptablesSaves(t)
	l, restConfig, client := upLab(ctx, t, root, bin, exampleConfig(t, "real-node.yaml", "t-real"))
	decoyChain := "ipv4/filter/KUBE-DRALAB-DECOY"
	if out, err := exec.Command("iptables", "-t", "filter", "-N", "KUBE-DRALAB-DECOY").CombinedOutput(); err != nil {
		t.Fatalf("creating a decoy chain: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("iptables", "-t", "filter", "-X", "KUBE-DRALAB-DECOY").Run() })
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := labstate.Dir(st.StateDir).ReadStatus()
	if err != nil {
		t.Fatal(err)
	}
	procs, ports := labProcesses(t, st)

	node, err := client.CoreV1().Nodes().Get(ctx, "real-h100", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://2.4.2") {
		t.Errorf("real node runtime = %q, want containerd 2.4.2", rt)
	}

	t.Run("a real container sees its GPU", func(t *testing.T) {
		logs := runGPUPod(ctx, t, client)
		for _, want := range []string{"GPU_DEVICE_0=gpu-", "GPU_DEVICE_0_PRODUCT=NVIDIA H100 80GB HBM3"} {
			if !strings.Contains(logs, want) {
				t.Errorf("container log lacks %q:\n%s", want, logs)
			}
		}
	})

	t.Run("a real container sees its NIC's interface", func(t *testing.T) {
		logs, data := runNICPod(ctx, t, client)
		t.Logf("network data %+v; the container's log:\n%s", *data, logs)
		if len(data.IPs) == 0 {
			t.Fatalf("network data %+v names no address", data)
		}
		// As the claim's network data names it: the interface, its
		// hardware address and its address, in the pod's own network
		// namespace (the node's is the host's, which has no such
		// interface).
		for _, want := range []string{
			"DRALAB_NIC_0_INTERFACE=" + data.InterfaceName, "address " + data.HardwareAddress,
			"inet " + data.IPs[0],
		} {
			if !strings.Contains(logs, want) {
				t.Errorf("container log lacks %q:\n%s", want, logs)
			}
		}
		if _, err := net.InterfaceByName(data.InterfaceName); err == nil {
			t.Errorf("the host has the container's interface %s", data.InterfaceName)
		}
	})

	t.Run("the real kubelet's podresources API lists the pod's device", func(t *testing.T) {
		runClaimPod(ctx, t, client, "watched", "h100.gpu.dralab.dev", "echo ready; sleep 100000", "ready", func(claim *resourceapi.ResourceClaim) {
			checkPodResources(ctx, t, l, "real-h100", "watched", "main", claim)
		})
	})

	t.Run("a real container reads its device metadata", func(t *testing.T) {
		script := `for f in $(find ` + metadata.ContainerDir + ` -name '*.json'); do echo "$f=$(tr -d '\n' < $f)"; done; echo printed; sleep 100000`
		logs, claim := runClaimPod(ctx, t, client, "meta", "h100.gpu.dralab.dev", script, "printed", nil)
		snap, err := allocation.Read(ctx, client, "default", nodedrivers.Vocabulary)
		if err != nil {
			t.Fatal(err)
		}
		found, err := snap.ParseMetadata(logs)
		if err != nil {
			t.Fatalf("%v; the container's log:\n%s", err, logs)
		}
		results := claim.Status.Allocation.Devices.Results
		if len(found) != 1 || len(results) != 1 {
			t.Fatalf("metadata names %+v, the claim has %+v; the container's log:\n%s", found, results, logs)
		}
		r, m := results[0], found[0]
		if m.Driver != r.Driver || m.Pool != r.Pool || m.Device != r.Device || m.Request != r.Request || !m.SameAsSlice {
			t.Errorf("metadata %+v, want %s/%s/%s of request %s with its slice's attributes", m, r.Driver, r.Pool, r.Device, r.Request)
		}
		if want := metadata.ResourceClaimTemplateFilePath(r.Driver, "dev", r.Request); m.Path != want {
			t.Errorf("the file is at %s, want %s", m.Path, want)
		}
		t.Logf("the container read %s: %s/%s/%s, %d attributes", m.Path, m.Driver, m.Pool, m.Device, m.Attributes)
	})

	// gpu-failure: the real kubelet shows a failed GPU in the pod's status,
	// the driver's taint gets the pod evicted from a real container.
	runScenarios(ctx, t, l, restConfig, "claims", "prioritized-fallback", "gpu-failure")

	t.Run("a killed containerd is started again and containers run on", func(t *testing.T) {
		p, ok := s.Process(labstate.RoleContainerd, "real-h100")
		if !ok {
			t.Fatalf("no containerd in %+v", s.Processes)
		}
		if err := p.ID.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var node lab.NodeStatus
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			st, err := l.Status(ctx)
			if err != nil {
				return false, nil
			}
			for _, n := range st.Nodes {
				if n.Name == "real-h100" {
					node = n
				}
			}
			return node.Healthy && strings.Contains(node.Process, "containerd running") && strings.Contains(node.Process, "1 restarts"), nil
		})
		if err != nil {
			t.Fatalf("containerd was not started again: node %+v: %v", node, err)
		}
		logs := runGPUPod(ctx, t, client)
		if !strings.Contains(logs, "GPU_DEVICE_0=gpu-") {
			t.Errorf("after containerd's restart, the container log lacks its GPU:\n%s", logs)
		}
	})

	t.Run("a second lab with a real node is refused", func(t *testing.T) {
		second := newLab(t, stateRoot(t), bin, exampleConfig(t, "real-node.yaml", "t-real-2"))
		_, err := second.Up(ctx)
		if err == nil || !strings.Contains(err.Error(), "another lab's real node runs on this host") {
			t.Errorf("Up of a second real-node lab = %v; want it refused, naming the other lab's real node", err)
		}
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/cpu", realnode.CgroupRoot("t-real-2"))); err == nil {
			t.Error("the refused lab created its cgroup")
		}
	})

	if t.Failed() {
		dir, _ := os.MkdirTemp("", "dralab-realnode-logs-")
		if err := l.CollectLogs(ctx, dir); err == nil {
			t.Logf("lab logs: %s", dir)
		}
	}
	// The hardest way down: the lab process killed (nothing cleaned up at
	// exit), its configuration no longer valid. lab:down undoes the real
	// node from its host record alone.
	rec, err := realnode.ReadHostRecord(realnode.Paths{Node: labstate.Dir(st.StateDir).Node("real-h100")})
	if err != nil {
		t.Fatal(err)
	}
	if !rec.ChainsRecorded || len(rec.CgroupDirs) == 0 || slices.Contains(rec.ChainsCreated, decoyChain) {
		t.Errorf("host record = %+v; want the node's cgroups and chains recorded, and not the decoy", rec)
	}
	if err := s.ID.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := procid.WaitGone(ctx, []procid.ID{s.ID}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(labstate.Dir(st.StateDir).Config(), []byte("nodes: [{kind: imaginary"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, procs, ports)
	if shims := realnode.ProcessesWith(filepath.Join(st.StateDir, "nodes")); len(shims) > 0 {
		t.Errorf("processes of the lab still run after Down: %v", shims)
	}
	if m, err := mounts.Under(st.StateDir); err != nil || len(m) > 0 {
		t.Errorf("mounts left after Down: %v (%v)", m, err)
	}
	if _, err := net.InterfaceByName(realnode.BridgeName); err == nil {
		t.Errorf("bridge %s left after Down", realnode.BridgeName)
	}
	if after, want := realnode.IptablesChains(ctx), append(slices.Clone(chainsBefore), decoyChain); !sameSet(after, want) {
		t.Errorf("iptables chains after Down %v, want those before and the decoy: %v", after, want)
	}
	// Every table of both families as it was, but for the decoy.
	if out, err := exec.Command("iptables", "-t", "filter", "-X", "KUBE-DRALAB-DECOY").CombinedOutput(); err != nil {
		t.Errorf("removing the decoy chain: %v: %s", err, out)
	}
	for cmd, after := range iptablesSaves(t) {
		if after != savedBefore[cmd] {
			t.Errorf("%s after Down differs from before the lab:\nbefore:\n%s\nafter:\n%s", cmd, savedBefore[cmd], after)
		}
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*" + realnode.CgroupRoot("t-real")); len(left) > 0 {
		t.Errorf("the lab's cgroups left after Down: %v", left)
	}
	if _, err := os.Stat(decoyCgroup); err != nil {
		t.Errorf("Down removed a cgroup it did not create, %s: %v", decoyCgroup, err)
	}
	if after := existing(realnode.KubeletHostPaths); !sameSet(after, hostPathsBefore) {
		t.Errorf("kubelet host paths before %v, after Down %v", hostPathsBefore, after)
	}
	if links, err := net.Interfaces(); err == nil {
		for _, l := range links {
			if strings.HasPrefix(l.Name, nicapp.HostVethPrefix) {
				t.Errorf("the host end of a NIC's veth pair, %s, left after Down", l.Name)
			}
		}
	}
	if netns, _ := filepath.Glob("/run/netns/cni-*"); len(netns) > 0 {
		t.Errorf("network namespaces left after Down: %v", netns)
	}
}

// runGPUPod runs a busybox pod with an H100 claim on the real node and
// returns its log: its environment's GPU variables.
func runGPUPod(ctx context.Context, t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	logs, _ := runClaimPod(ctx, t, client, "cuda-check", "h100.gpu.dralab.dev", "env | grep GPU_; sleep 100000", "GPU_DEVICE_0=", nil)
	return logs
}

// runNICPod runs a busybox pod with a NIC claim on the real node and
// returns its log (its NIC variables, then its interface's hardware
// address and addresses, as the container sees them) and the network
// data the driver wrote in the claim's status.
func runNICPod(ctx context.Context, t *testing.T, client kubernetes.Interface) (string, *resourceapi.NetworkDeviceData) {
	t.Helper()
	script := `env | grep DRALAB_NIC_; i=$DRALAB_NIC_0_INTERFACE; echo "address $(cat /sys/class/net/$i/address)"; ip -o -4 addr show dev $i; echo done; sleep 100000`
	logs, claim := runClaimPod(ctx, t, client, "nic-check", "nic.dralab.dev", script, "\ndone", nil)
	for _, d := range claim.Status.Devices {
		if d.Driver == "nic.dralab.dev" && d.NetworkData != nil {
			return logs, d.NetworkData
		}
	}
	t.Fatalf("claim %s's status has no network data: %+v", claim.Name, claim.Status.Devices)
	return "", nil
}

// runClaimPod runs a busybox pod on the real node with a claim for one
// device of class, running script, until its log holds ready; it calls
// during (if set) with the claim while the pod runs, returns the log and
// the pod's claim, and deletes the pod.
func runClaimPod(ctx context.Context, t *testing.T, client kubernetes.Interface, name, class, script, ready string, during func(*resourceapi.ResourceClaim)) (string, *resourceapi.ResourceClaim) {
	t.Helper()
	ns := "default"
	tmpl := fmt.Sprintf(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":%q},"spec":{"spec":{"devices":{"requests":[{"name":"dev","exactly":{"deviceClassName":%q}}]}}}}`, name, class)
	if err := client.ResourceV1().RESTClient().Post().Namespace(ns).Resource("resourceclaimtemplates").Body([]byte(tmpl)).Do(ctx).Error(); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": "real-h100"},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []v1.Container{{
				Name: "main", Image: realnode.BusyboxImage, ImagePullPolicy: v1.PullNever,
				Command:   []string{"sh", "-c", script},
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "dev"}}},
			}},
			ResourceClaims: []v1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To(name)}},
		},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			claims, err := client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(claims.Items) == 0, nil
		})
	}()
	var logs string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		data, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{}).DoRaw(ctx)
		logs = string(data)
		return err == nil && strings.Contains(logs, ready), nil
	})
	if err != nil {
		p, _ := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		t.Fatalf("the pod's log never showed %q (%v); pod status: %+v; log: %s", ready, err, p.Status, logs)
	}
	p, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s's claim: %v, %+v", name, err, p.Status.ResourceClaimStatuses)
	}
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during(claim)
	}
	return logs, claim
}

// runScenarios runs scenarios as subtests on a lab, logging each step's
// allocation table; scenarios fail the lab's GPUs through it.
func runScenarios(ctx context.Context, t *testing.T, l *lab.Lab, restConfig *rest.Config, names ...string) {
	t.Helper()
	for _, name := range names {
		t.Run("scenario "+name, func(t *testing.T) {
			sc, err := scenarios.Get(name)
			if err != nil {
				t.Fatal(err)
			}
			runner, err := scenarios.NewRunner(restConfig)
			if err != nil {
				t.Fatal(err)
			}
			runner.OnStep = func(step string, rows []allocation.Row) {
				t.Logf("%s:\n%s", step, allocation.Table(rows))
			}
			runner.GPUFaults = lab.GPUFaults{Lab: l}
			res, err := runner.Run(ctx, sc)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range res.Failures() {
				t.Error(f)
			}
		})
	}
}

// decoyKubepods makes a cgroup under kubepods, as another kubelet on the
// host would have, and removes it at the end.
func decoyKubepods(t *testing.T) string {
	t.Helper()
	parent := "/sys/fs/cgroup/cpu/kubepods"
	_, err := os.Stat(parent)
	madeParent := errors.Is(err, os.ErrNotExist)
	decoy := filepath.Join(parent, "dralab-decoy")
	if err := os.MkdirAll(decoy, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Rmdir(decoy)
		if madeParent {
			_ = syscall.Rmdir(parent)
		}
	})
	return decoy
}

// existing returns the paths that exist.
func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// iptablesSaves is what iptables-save and ip6tables-save print, every
// table, without what changes by itself: the comment lines (a timestamp)
// and the packet and byte counters.
func iptablesSaves(t *testing.T) map[string]string {
	t.Helper()
	counters := regexp.MustCompile(`\[\d+:\d+\]`)
	out := map[string]string{}
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		data, err := exec.Command(cmd).Output()
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		var lines []string
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(line, "#") {
				lines = append(lines, counters.ReplaceAllString(line, "[-]"))
			}
		}
		out[cmd] = strings.Join(lines, "\n")
	}
	return out
}
