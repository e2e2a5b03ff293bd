package lab_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/status"
)

// These tests start real embedded labs from the dralab binary
// ($DRALAB_BINARY, else built); `go test -short` leaves them out.

func binary(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("starts embedded labs: run without -short")
	}
	bin, err := build.Dralab(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

func smallConfig(name string, nodes ...string) *config.Config {
	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Name: name, Backend: config.BackendEmbedded}
	for _, n := range nodes {
		cfg.Nodes = append(cfg.Nodes, config.Node{Name: n, Kind: config.NodeHollow, GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1}})
	}
	return cfg
}

// stateRoot is short: unix socket paths under it must stay below 108 bytes.
func stateRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newLab(t testing.TB, root, bin string, cfg *config.Config) *lab.Lab {
	t.Helper()
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root), lab.WithBinary(bin), lab.WithOwner(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return l
}

// labProcesses returns the lab process and its nodes as the lab recorded
// them, and the loopback ports they listen on.
func labProcesses(t *testing.T, st *lab.Status) ([]procid.ID, []int) {
	t.Helper()
	procs := recordedProcesses(t, labstate.Dir(st.StateDir))
	return procs, listeningPorts(t, procs)
}

// recordedProcesses returns the lab process and its children as the lab
// recorded them.
func recordedProcesses(t *testing.T, dir labstate.Dir) []procid.ID {
	t.Helper()
	s, err := dir.ReadStatus()
	if err != nil {
		t.Fatal(err)
	}
	procs := []procid.ID{s.ID}
	for _, p := range s.Processes {
		procs = append(procs, p.ID)
	}
	return procs
}

// listeningPorts reads the TCP listeners owned by the given processes from
// /proc, failing on any that is not on loopback.
func listeningPorts(t *testing.T, procs []procid.ID) []int {
	t.Helper()
	listeners, err := procid.Listeners(procs)
	if err != nil {
		t.Fatal(err)
	}
	var ports []int
	for _, l := range listeners {
		if !l.IP.Equal(net.IPv4(127, 0, 0, 1)) {
			t.Errorf("a lab process listens on %s, not on 127.0.0.1", l)
		}
		ports = append(ports, l.Port)
	}
	return ports
}

func TestUpReuseDown(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	root := stateRoot(t)
	cfg := smallConfig("t-reuse", "n1", "n2")
	l := newLab(t, root, bin, cfg)
	chainsBefore := realnode.IptablesChains(ctx)

	res, err := l.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused {
		t.Error("a new lab reports Reused")
	}
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != "Running" || len(st.Nodes) != 2 {
		t.Fatalf("status = %s with %d nodes, want Running with 2", st.Phase, len(st.Nodes))
	}
	for _, n := range st.Nodes {
		if n.Ready != "True" || !strings.HasPrefix(n.Process, "running") || !strings.HasPrefix(n.Driver, "running") {
			t.Errorf("node %s: ready %s, process %s, driver %s", n.Name, n.Ready, n.Process, n.Driver)
		}
	}
	info, err := os.Stat(l.Kubeconfig())
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig %s: mode %v, %v; want 0600", l.Kubeconfig(), info.Mode().Perm(), err)
	}
	procs, ports := labProcesses(t, st)
	assertStatusNamesWhatTheLabHolds(t, l, st, procs)
	// The API server, one kubelet per node, the dashboard (behind its
	// token, which assertNoDataWithoutCertificate does not have) and each
	// GPU driver's metrics, on the loopback address its node's state
	// records (what lab:metrics reads); etcd serves on a unix socket in the
	// private state directory, not on a port.
	if len(ports) != 1+len(cfg.Nodes)+1+len(cfg.Nodes) {
		t.Errorf("lab listens on %v, want exactly the API server, each kubelet, the dashboard and each driver's metrics", ports)
	}
	for _, n := range cfg.Nodes {
		address, err := os.ReadFile(labstate.Dir(st.StateDir).Node(n.Name).Driver(labstate.RoleDriver).Metrics)
		_, port, _ := net.SplitHostPort(strings.TrimSpace(string(address)))
		if err != nil || !strings.HasPrefix(string(address), "127.0.0.1:") || !slices.Contains(ports, mustAtoi(port)) {
			t.Errorf("node %s's driver metrics address %q (%v): want a loopback port the lab listens on", n.Name, address, err)
		}
	}
	if url, err := l.DashboardURL(); err != nil {
		t.Error(err)
	} else if u, err := neturl.Parse(url); err != nil || !slices.Contains(ports, mustAtoi(u.Port())) {
		t.Errorf("the dashboard's URL %s is not on a port of the lab's (%v): %v", url, ports, err)
	}
	assertNoDataWithoutCertificate(t, ports)
	// Hollow nodes have no network: they leave the host's iptables alone.
	if after := realnode.IptablesChains(ctx); !sameSet(after, chainsBefore) {
		t.Errorf("iptables chains before the lab %v, with it running %v", chainsBefore, after)
	}
	assertPrivate(t, labstate.Dir(st.StateDir).EtcdSocket())
	assertDriversMayWriteClaimStatus(ctx, t, labstate.Dir(st.StateDir).Node("n1"))
	assertServesOlderResourceVersions(ctx, t, l.Kubeconfig())
	assertBootstrapPolicyIsKubernetes(ctx, t, l.Kubeconfig())
	assertInitContainersComplete(ctx, t, l.Kubeconfig())
	assertTaintRuleSelectors(ctx, t, l.Kubeconfig())
	assertObservability(ctx, t, l)

	// Same configuration: reused, same process.
	res, err = l.Up(ctx)
	if err != nil || !res.Reused {
		t.Fatalf("second Up = %+v, %v; want reuse", res, err)
	}
	if st2, _ := l.Status(ctx); st2.PID != st.PID {
		t.Errorf("reuse restarted the lab: pid %d → %d", st.PID, st2.PID)
	}

	// Another configuration under the same name: explained, lab untouched.
	other := newLab(t, root, bin, smallConfig("t-reuse", "n1"))
	if _, err := other.Up(ctx); !errors.Is(err, lab.ErrConfigMismatch) || !strings.Contains(err.Error(), "lab:down") {
		t.Errorf("Up with another config = %v, want ErrConfigMismatch telling how to delete the lab", err)
	}
	if st3, _ := l.Status(ctx); st3.Phase != "Running" || st3.PID != st.PID {
		t.Errorf("a refused Up disturbed the running lab: %+v", st3)
	}

	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, procs, ports)
	if _, err := os.Stat(st.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state %s remains after Down: %v", st.StateDir, err)
	}
	for _, n := range cfg.Nodes {
		if link := labstate.Dir(st.StateDir).Node(n.Name).ShortLink(); exists(link) {
			t.Errorf("node %s's short path %s remains after Down", n.Name, link)
		}
	}
	if st, _ := l.Status(ctx); st.Phase != "Absent" {
		t.Errorf("status after Down = %s", st.Phase)
	}
}

// assertStatusNamesWhatTheLabHolds checks that the lab's status tells a
// harness what the lab holds on the host without reading the embedded
// backend's files: the processes recorded (the lab process first), each
// node's short link and driver checkpoint, and that the lab's kubeconfig
// is known as the lab's.
func assertStatusNamesWhatTheLabHolds(t *testing.T, l *lab.Lab, st *lab.Status, recorded []procid.ID) {
	t.Helper()
	var got []procid.ID
	for _, p := range st.Processes {
		got = append(got, procid.ID{PID: p.PID, StartTime: p.StartTime, BootID: p.BootID})
	}
	if len(st.Processes) == 0 || st.Processes[0].Role != status.RoleLab || st.Processes[0].PID != st.PID {
		t.Errorf("status processes %+v: want the lab process (pid %d) first", st.Processes, st.PID)
	}
	want := slices.Clone(recorded)
	for i := range want {
		want[i].Executable = ""
	}
	if !slices.Equal(got, want) {
		t.Errorf("status processes %v, the lab recorded %v", got, want)
	}
	roles := map[string]int{}
	for i, p := range st.Processes {
		if i > 0 {
			roles[p.Role]++
		}
		if !p.Running || !got[i].Alive() {
			t.Errorf("process %+v: recorded as not running, or gone", p)
		}
	}
	if n := len(st.Nodes); roles[status.RoleNode] != n || roles[status.RoleDriver] != n {
		t.Errorf("status process roles %v: want a kubelet and a driver for each of %d nodes", roles, n)
	}
	dir := labstate.Dir(st.StateDir)
	for _, n := range st.Nodes {
		if want := dir.Node(n.Name).Driver(labstate.RoleDriver).Checkpoint; n.CheckpointDir != want {
			t.Errorf("node %s: checkpoint directory %q, want %q", n.Name, n.CheckpointDir, want)
		}
		if !slices.Contains(st.HostLinks, dir.Node(n.Name).ShortLink()) {
			t.Errorf("host links %v lack node %s's short link", st.HostLinks, n.Name)
		}
	}
	if d, ok := lab.OfKubeconfig(l.Kubeconfig(), st.APIServer); !ok || d != st.StateDir {
		t.Errorf("OfKubeconfig(the lab's kubeconfig) = %q, %v; want %s", d, ok, st.StateDir)
	}
	if _, ok := lab.OfKubeconfig(l.Kubeconfig(), "https://127.0.0.1:1"); ok {
		t.Error("OfKubeconfig took the lab's kubeconfig for another API server's")
	}
}

func TestUpExplainsPortInUse(t *testing.T) {
	bin := binary(t)
	l0, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l0.Close()
	cfg := smallConfig("t-port", "n1")
	cfg.APIServerPort = l0.Addr().(*net.TCPAddr).Port
	l := newLab(t, stateRoot(t), bin, cfg)
	_, err = l.Up(context.Background())
	if !errors.Is(err, lab.ErrPortInUse) || !strings.Contains(err.Error(), strconv.Itoa(cfg.APIServerPort)) {
		t.Fatalf("Up on a taken port = %v, want ErrPortInUse naming the port", err)
	}
}

// A driver whose plugin sockets cannot fit a unix socket path, whatever
// the state directory (the kubelet's directory is a short link), is
// refused before anything starts, naming the socket, instead of the driver
// failing forever.
func TestUpRefusesSocketPathsTooLong(t *testing.T) {
	bin := binary(t)
	root := filepath.Join(stateRoot(t), strings.Repeat("deep/", 12))
	cfg := smallConfig("t-deep", "node-with-a-long-name")
	cfg.Nodes[0].GPUs = nil
	cfg.Driver = &config.Driver{Name: strings.Repeat("long", 15) + ".example.com", Command: []string{"/bin/true"}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	l := newLab(t, root, bin, cfg)
	_, err := l.Up(context.Background())
	if !errors.Is(err, lab.ErrPathTooLong) || !strings.Contains(err.Error(), "node-with-a-long-name") || !strings.Contains(err.Error(), "long.example.com") || !strings.Contains(err.Error(), "driver name") {
		t.Fatalf("Up = %v, want ErrPathTooLong naming the node and socket", err)
	}
	if _, err := os.Stat(root); err == nil {
		if entries, _ := os.ReadDir(root); len(entries) > 0 {
			t.Errorf("Up left state behind in %s: %v", root, entries)
		}
	}
}

// assertNoDataWithoutCertificate connects to each port as a client
// without the lab's certificate, over TLS and in plain HTTP, and fails if
// any answers a request for pods with anything but a refusal.
func assertNoDataWithoutCertificate(t *testing.T, ports []int) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The server's identity is not what is tested: the client's is.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
	}}
	for _, port := range ports {
		for _, url := range []string{
			fmt.Sprintf("https://127.0.0.1:%d/api/v1/pods", port), // API server
			fmt.Sprintf("https://127.0.0.1:%d/pods", port),        // kubelet
			fmt.Sprintf("http://127.0.0.1:%d/api/v1/pods", port),
			fmt.Sprintf("http://127.0.0.1:%d/pods", port),
		} {
			resp, err := client.Get(url)
			if err != nil {
				continue // refused in the handshake
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode < 400 {
				t.Errorf("GET %s without the lab's client certificate: %s %q", url, resp.Status, body)
			}
		}
	}
}

// assertDriversMayWriteClaimStatus asks the API server, as node n1's
// driver, what it may do: exactly what the driver's chart grants in a
// cluster (internal/driverauth) — claims read, their device status patched
// on its own node only, its own node's slices written — and no more.
func assertDriversMayWriteClaimStatus(ctx context.Context, t *testing.T, node labstate.NodeDir) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", node.Driver(labstate.RoleDriver).Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	// The token is the driver's ServiceAccount's, bound to node n1.
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != "system:serviceaccount:"+labstate.DriversNamespace+":gpu-dralab-dev" ||
		!slices.Equal(u.Extra["authentication.kubernetes.io/node-name"], []string{"n1"}) {
		t.Errorf("the driver of n1 is %s with extra %v, want the ServiceAccount gpu-dralab-dev bound to n1", u.Username, u.Extra)
	}
	for _, c := range []struct {
		attrs authorizationv1.ResourceAttributes
		allow bool
	}{
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Verb: "get", Namespace: "any"}, true},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Subresource: "status", Verb: "patch", Namespace: "any"}, true},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Subresource: "driver", Name: "gpu.dralab.dev", Verb: "associated-node:patch", Namespace: "any"}, true},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceslices", Verb: "create"}, true},
		{authorizationv1.ResourceAttributes{Resource: "nodes", Verb: "get", Name: "n1"}, true},
		// What the lab granted before and a cluster does not.
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Subresource: "driver", Name: "gpu.dralab.dev", Verb: "arbitrary-node:patch", Namespace: "any"}, false},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Subresource: "driver", Name: "gpu.example.com", Verb: "associated-node:patch", Namespace: "any"}, false},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Subresource: "status", Verb: "update", Namespace: "any"}, false},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Verb: "list", Namespace: "any"}, false},
		{authorizationv1.ResourceAttributes{Resource: "pods", Verb: "list", Namespace: "any"}, false},
	} {
		review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &c.attrs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != c.allow {
			t.Errorf("a lab driver may %s %s/%s %s: %v, want %v (%s)", c.attrs.Verb, c.attrs.Resource, c.attrs.Subresource, c.attrs.Name, review.Status.Allowed, c.allow, review.Status.Reason)
		}
	}
	// RBAC lets it create slices; the own-node policy only of its own node
	// and driver.
	for _, s := range []struct{ node, driver, want string }{
		{"n2", "gpu.dralab.dev", "may only write that node's ResourceSlices"},
		{"n1", "gpu.example.com", "only write its own driver's ResourceSlices"},
	} {
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "foreign-"},
			Spec: resourceapi.ResourceSliceSpec{Driver: s.driver, NodeName: ptr.To(s.node),
				Pool: resourceapi.ResourcePool{Name: s.node, ResourceSliceCount: 1}, Devices: []resourceapi.Device{{Name: "gpu-9"}}},
		}
		_, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), s.want) {
			t.Errorf("n1's driver creating a %s slice of node %s: %v, want denied: %s", s.driver, s.node, err, s.want)
		}
	}
}

// assertServesOlderResourceVersions applies a DeviceTaintRule written as
// resource.k8s.io/v1beta2, the only version before 1.37, and reads it back
// as v1; and lists claims as v1beta1.
func assertServesOlderResourceVersions(ctx context.Context, t *testing.T, kubeconfig string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := dynamic.NewForConfigOrDie(cfg)
	rule := &unstructured.Unstructured{}
	if err := rule.UnmarshalJSON([]byte(`{"apiVersion":"resource.k8s.io/v1beta2","kind":"DeviceTaintRule","metadata":{"name":"old-manifest"},
		"spec":{"deviceSelector":{"driver":"gpu.dralab.dev","pool":"n1","device":"gpu-0"},"taint":{"key":"example.com/old","effect":"NoSchedule"}}}`)); err != nil {
		t.Fatal(err)
	}
	v1beta2 := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1beta2", Resource: "devicetaintrules"}
	if _, err := client.Resource(v1beta2).Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatalf("applying a v1beta2 DeviceTaintRule: %v", err)
	}
	defer func() { _ = client.Resource(v1beta2).Delete(ctx, "old-manifest", metav1.DeleteOptions{}) }()
	got, err := kubernetes.NewForConfigOrDie(cfg).ResourceV1().DeviceTaintRules().Get(ctx, "old-manifest", metav1.GetOptions{})
	if err != nil || got.Spec.Taint.Key != "example.com/old" || got.Spec.DeviceSelector == nil || ptr.Deref(got.Spec.DeviceSelector.Device, "") != "gpu-0" {
		t.Errorf("the v1beta2 rule read as v1 = %+v, %v", got, err)
	}
	v1beta1 := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1beta1", Resource: "resourceclaims"}
	if _, err := client.Resource(v1beta1).Namespace("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing v1beta1 ResourceClaims: %v", err)
	}
}

// assertInitContainersComplete runs a pod with two init containers and a
// sidecar on a hollow node: the init containers complete (exit 0, their
// log is their environment) one after the other, and the pod runs.
func assertInitContainersComplete(ctx context.Context, t *testing.T, kubeconfig string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	container := func(name string) v1.Container {
		return v1.Container{Name: name, Image: "busybox", Env: []v1.EnvVar{{Name: "STEP", Value: name}}}
	}
	sidecar := container("sidecar")
	sidecar.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "with-init", Namespace: "default"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{container("fetch"), sidecar, container("migrate")},
			Containers:     []v1.Container{container("app")},
		},
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	var got *v1.Pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err = client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == v1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("a pod with init containers did not run within a minute: %v; status: %+v", err, got.Status)
	}
	for _, s := range got.Status.InitContainerStatuses {
		switch s.Name {
		case "sidecar":
			if s.State.Running == nil {
				t.Errorf("sidecar %s is not running: %+v", s.Name, s.State)
			}
		default:
			if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 || s.State.Terminated.Reason != "Completed" {
				t.Errorf("init container %s did not complete: %+v", s.Name, s.State)
			}
		}
	}
	logs, err := client.CoreV1().Pods("default").GetLogs(pod.Name, &v1.PodLogOptions{Container: "migrate"}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "STEP=migrate") {
		t.Errorf("init container log = %q, %v; want its environment", logs, err)
	}
}

// assertPrivate fails unless path exists in a directory only its owner
// may enter.
func assertPrivate(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("%s: %v", path, err)
	}
	info, err := os.Stat(filepath.Dir(path))
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("%s lies in a directory of mode %v (%v), want 0700", path, info.Mode().Perm(), err)
	}
}

// exists tells whether a path exists, without following a last link.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// labProcess is the lab process as the lab recorded it.
func labProcess(t *testing.T, st *lab.Status) procid.ID {
	t.Helper()
	id, err := labstate.Dir(st.StateDir).ReadProcess()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// assertGone fails for every process still running (the process the lab
// recorded, not another that got its PID since) and every port still
// listening.
func assertGone(t *testing.T, procs []procid.ID, ports []int) {
	t.Helper()
	for _, p := range procs {
		if p.Alive() {
			t.Errorf("%s still runs after Down", p)
		}
	}
	for _, port := range ports {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
			c.Close()
			t.Errorf("port %d still listens after Down", port)
		}
	}
}

// TestShutdownOrder: a lab stops its drivers and nodes while the API server
// still answers (they unprepare and deregister against it), and the
// control plane after them.
func TestShutdownOrder(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	l := newLab(t, stateRoot(t), bin, smallConfig("t-order", "n1"))
	if _, err := l.Up(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := labProcess(t, st)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := procid.WaitGone(ctx, []procid.ID{p}, 45*time.Second); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(labstate.Dir(st.StateDir).Log("lab"))
	if err != nil {
		t.Fatal(err)
	}
	nodes := strings.Index(string(log), "Stopped the lab's drivers and nodes")
	cp := strings.Index(string(log), "Stopped the control plane")
	if nodes < 0 || cp < 0 || nodes > cp {
		t.Errorf("lab log: drivers and nodes stopped at offset %d, control plane at %d; want both, nodes first:\n%s", nodes, cp, log)
	}
}

// ownerEnv makes the test binary a lab's owner: see TestOwnerProcess.
const ownerEnv = "DRALAB_TEST_OWNER_ROOT"

// TestOwnerProcess is the owner that TestLabEndsWithItsOwner kills: run
// by it with ownerEnv set, it brings up a lab it owns and waits to be
// killed. Run on its own, it has nothing to do.
func TestOwnerProcess(t *testing.T) {
	root := os.Getenv(ownerEnv)
	if root == "" {
		return
	}
	l, err := lab.New(lab.WithConfig(smallConfig("t-owner", "n1", "n2")), lab.WithStateRoot(root),
		lab.WithBinary(os.Getenv(build.EnvBinary)), lab.WithOwner(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Println("lab up")
	select {}
}

// TestLabEndsWithItsOwner: SIGKILL of a test that owns a lab leaves no lab
// process, listener or state behind within 30 s.
func TestLabEndsWithItsOwner(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	root, err := os.MkdirTemp("", "dl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	owner := exec.Command(os.Args[0], "-test.run=^TestOwnerProcess$", "-test.timeout=5m")
	owner.Env = append(os.Environ(), ownerEnv+"="+root, build.EnvBinary+"="+bin)
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	owner.Stderr = os.Stderr
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })
	up := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "lab up" {
				up <- true
				break
			}
		}
		close(up)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-up:
		if !ok {
			t.Fatal("the owner process ended before its lab was up")
		}
	case <-time.After(4 * time.Minute):
		t.Fatal("the owner's lab was not up within 4 minutes")
	}
	dir := labstate.Dir(filepath.Join(root, "t-owner"))
	procs := recordedProcesses(t, dir)
	ports := listeningPorts(t, procs)
	if len(ports) == 0 {
		t.Fatal("the owner's lab listens on no port")
	}

	killed := time.Now()
	if err := owner.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	if err := procid.WaitGone(ctx, procs, 30*time.Second); err != nil {
		t.Fatalf("after its owner was killed: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second-time.Since(killed), true, func(context.Context) (bool, error) {
		_, err := os.Stat(root)
		return errors.Is(err, os.ErrNotExist), nil
	})
	if err != nil {
		entries, _ := os.ReadDir(string(dir))
		t.Fatalf("the lab's state %s remains 30 s after its owner was killed: %v", dir, entries)
	}
	assertGone(t, procs, ports)
	for _, n := range []string{"n1", "n2"} {
		if link := dir.Node(n).ShortLink(); exists(link) {
			t.Errorf("node %s's short path %s remains", n, link)
		}
	}
	t.Logf("lab processes, listeners and state gone %.1f s after the owner's SIGKILL", time.Since(killed).Seconds())
}

// TestFailedUpKeepsLogs: a lab that fails to come up is deleted, and its
// error says where its logs were kept, since the paths it names are gone.
func TestFailedUpKeepsLogs(t *testing.T) {
	bin := binary(t)
	cfg := smallConfig("t-fails", "n1")
	cfg.Nodes[0].GPUs = nil
	cfg.Driver = &config.Driver{Name: "gpu.example.com", Command: []string{"/nonexistent/dra-plugin", "--node={nodeName}"}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	root := stateRoot(t)
	// Not owned by this test: a user's lab:up.
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root), lab.WithBinary(bin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Down(context.Background()) })
	_, err = l.Up(context.Background())
	if err == nil {
		t.Fatal("a lab whose driver cannot start came up")
	}
	const kept = "are kept in "
	i := strings.LastIndex(err.Error(), kept)
	if i < 0 {
		t.Fatalf("Up = %v; want it to say where the logs are kept", err)
	}
	dir := strings.TrimSuffix(err.Error()[i+len(kept):], ")")
	t.Cleanup(func() { os.RemoveAll(dir) })
	log, rerr := os.ReadFile(filepath.Join(dir, "lab.log"))
	reason := strings.Index(string(log), "/nonexistent/dra-plugin")
	if rerr != nil || reason < 0 {
		t.Errorf("kept lab log in %s: %v; want it to name the plugin that failed (Up said: %v):\n%s", dir, rerr, err, log)
	}
	// The reason comes before the lab stops what it started: the log
	// names it even when the shutdown is cut short.
	if stop := strings.Index(string(log), "Stopped the lab's drivers and nodes"); stop >= 0 && stop < reason {
		t.Errorf("kept lab log in %s names the failed plugin only after the shutdown began:\n%s", dir, log)
	}
	if _, serr := os.Stat(filepath.Join(root, "t-fails")); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the failed lab's state remains: %v", serr)
	}
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
