package lab_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/charts"
	"github.com/dralab/dralab/charts/release"
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
	if err := release.Install(ctx, l.Kubeconfig(), charts.DriverChart, "dralab-driver", "dralab-system", values); err != nil {
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
			{nil, "the driver's token is not bound to a node"},
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
	t.Run("the driver runs confined", requireConfinedDriver)
	t.Run("a real container sees the GPU the chart's driver prepared", func(t *testing.T) {
		logs := runGPUPod(ctx, t, client)
		if !strings.Contains(logs, "GPU_DEVICE_0_PRODUCT=NVIDIA H100 80GB HBM3") {
			t.Errorf("container log lacks the H100:\n%s", logs)
		}
	})
	runScenarios(ctx, t, l, restConfig, "claims", "prioritized-fallback")
	t.Run("the driver repairs its node's pool", func(t *testing.T) {
		repairPool(ctx, t, client, "real-h100")
	})
	// After every dra-mode path the run can take: the driver's calls are all
	// in the audit log by now.
	t.Run("RBAC grants exactly what the driver calls", func(t *testing.T) {
		sa := pods.Items[0].Spec.ServiceAccountName
		granted, err := grantedTo(ctx, client, "dralab-system", sa)
		if err != nil {
			t.Fatal(err)
		}
		user := "system:serviceaccount:dralab-system:" + sa
		var used map[permission]bool
		// The API server writes a request's event as it answers: poll
		// briefly for the last calls' events.
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			f, err := os.Open(labstate.Dir(st.StateDir).AuditLog())
			if err != nil {
				return false, err
			}
			defer f.Close()
			used, err = calledBy(f, user)
			return err == nil && rbacMismatch(granted, used, unexercisedDriverVerbs) == "", err
		})
		if msg := rbacMismatch(granted, used, unexercisedDriverVerbs); msg != "" || err != nil {
			t.Errorf("%s (%v)\ncalled: %v\ngranted: %v", msg, err, permissions(used), permissions(granted))
		} else {
			t.Logf("the driver called and is granted: %v; granted, not called: %v", permissions(used), unexercisedDriverVerbs)
		}
	})
	t.Run("counting mode under the same restrictions", func(t *testing.T) {
		values["mode"] = "device-plugin"
		values["validatingAdmissionPolicy"] = map[string]any{"enabled": false}
		if err := release.Install(ctx, l.Kubeconfig(), charts.DriverChart, "dralab-driver", "dralab-system", values); err != nil {
			t.Fatal(err)
		}
		logs := runCountedGPUPod(ctx, t, client, "real-h100")
		if !strings.Contains(logs, "GPU_DEVICE_0_PRODUCT=NVIDIA H100 80GB HBM3") {
			t.Errorf("container log lacks the H100:\n%s", logs)
		}
		requireConfinedDriver(t)
	})
}

// requireConfinedDriver checks, on the host, that the chart's driver process
// runs as the chart says: no capability in any set, no new privileges, a
// seccomp filter and a read-only root.
func requireConfinedDriver(t *testing.T) {
	t.Helper()
	var pids []int
	for _, pid := range realnode.ProcessesWith("/dralab-driver") {
		// The image's entrypoint, without arguments; the lab's own drivers
		// run from the binary's directory, with flags.
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && string(cmd) == "/dralab-driver\x00" {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		t.Fatal("no process of the chart's driver on the host")
	}
	want := map[string]string{"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
	for _, pid := range pids {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if w, ok := want[k]; ok && strings.TrimSpace(v) != w {
				t.Errorf("driver process %d: %s %s, want %s", pid, k, strings.TrimSpace(v), w)
			}
		}
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			t.Fatal(err)
		}
		root := ""
		for _, line := range strings.Split(string(mounts), "\n") {
			// id parent major:minor root mountpoint options ...
			if f := strings.Fields(line); len(f) > 5 && f[4] == "/" {
				root = f[5]
			}
		}
		if !slices.Contains(strings.Split(root, ","), "ro") {
			t.Errorf("driver process %d: root mounted %q, want read-only", pid, root)
		}
	}
}

// runCountedGPUPod runs a pod asking a node for one GPU counted through the
// device-plugin API, once the node has its 2 GPUs allocatable, and returns
// the container's log.
func runCountedGPUPod(ctx context.Context, t *testing.T, client kubernetes.Interface, node string) string {
	t.Helper()
	var allocatable resource.Quantity
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		allocatable = n.Status.Allocatable[gpu.ExtendedResource]
		return allocatable.Value() == 2, nil
	})
	if err != nil {
		t.Fatalf("%s never had 2 %s allocatable (%v): %s", node, gpu.ExtendedResource, err, allocatable.String())
	}
	one := v1.ResourceList{gpu.ExtendedResource: resource.MustParse("1")}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "counted-check", Namespace: "default"},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []v1.Container{{
				Name: "main", Image: realnode.BusyboxImage, ImagePullPolicy: v1.PullNever,
				Command:   []string{"sh", "-c", "env | grep GPU_; sleep 100000"},
				Resources: v1.ResourceRequirements{Limits: one, Requests: one},
			}},
		},
	}
	pods := client.CoreV1().Pods(pod.Namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}) }()
	var logs string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		data, err := pods.GetLogs(pod.Name, &v1.PodLogOptions{}).DoRaw(ctx)
		logs = string(data)
		return err == nil && strings.Contains(logs, "GPU_DEVICE_0="), nil
	})
	if err != nil {
		p, _ := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		t.Fatalf("the pod's log never showed its GPU (%v); pod status: %+v; log: %s", err, p.Status, logs)
	}
	return logs
}

// repairPool tampers with a node's pool as an admin could, and waits for the
// node's driver to put it right: it updates its slice back and deletes a
// slice it did not write.
func repairPool(ctx context.Context, t *testing.T, client kubernetes.Interface, node string) {
	t.Helper()
	onNode := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}
	list, err := client.ResourceV1().ResourceSlices().List(ctx, onNode)
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("%d slices on %s (%v); want one", len(list.Items), node, err)
	}
	own := list.Items[0]
	want := len(own.Spec.Devices)
	tampered := own.DeepCopy()
	tampered.Spec.Devices = tampered.Spec.Devices[:want-1]
	if _, err := client.ResourceV1().ResourceSlices().Update(ctx, tampered, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	foreign := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign-" + node},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: own.Spec.Driver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: own.Spec.Pool.Name, Generation: own.Spec.Pool.Generation, ResourceSliceCount: 1},
		},
	}
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []string
	// The driver syncs a pool 30 s after its last change
	// (resourceslice.DefaultSyncDelay).
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, onNode)
		if err != nil {
			return false, nil
		}
		got = got[:0]
		for _, s := range list.Items {
			got = append(got, fmt.Sprintf("%s (%d devices)", s.Name, len(s.Spec.Devices)))
		}
		return len(list.Items) == 1 && list.Items[0].Name == own.Name && len(list.Items[0].Spec.Devices) == want, nil
	})
	if err != nil {
		t.Fatalf("the driver never restored %s with %d devices alone in its pool: %v; slices on %s: %v", own.Name, want, err, node, got)
	}
}

// permission is a verb on a resource, as RBAC grants it and an audit event
// records it; resource may name a subresource ("resourceclaims/status").
type permission struct{ group, resource, verb string }

func (p permission) String() string {
	res, sub, _ := strings.Cut(p.resource, "/")
	if p.group != "" {
		res += "." + p.group
	}
	if sub != "" {
		res += "/" + sub
	}
	return p.verb + " " + res
}

func permissions(set map[permission]bool) []string {
	var out []string
	for p := range set {
		out = append(out, p.String())
	}
	sort.Strings(out)
	return out
}

// unexercisedDriverVerbs are verbs the chart grants for paths of the driver
// that a lab run cannot trigger, each with its reason. Keep it short: a verb
// here is granted on trust.
var unexercisedDriverVerbs = map[permission]string{
	// The slice informer gets its initial list from a watch that streams it
	// (sendInitialEvents, client-go's WatchListClient), which the lab's API
	// server serves; it falls back to a list where a server cannot.
	{"resource.k8s.io", "resourceslices", "list"}: "the slice informer's fallback where the API server cannot stream lists",
	// Not a request: the API server's authorization check of a
	// status.devices write, which the audit log records as the
	// resourceclaims/status patch.
	{"resource.k8s.io", "resourceclaims/driver", "associated-node:patch"}: "an authorization check of the claim status patch, not a call",
}

// grantedTo returns what the cluster's role bindings grant a service account.
func grantedTo(ctx context.Context, client kubernetes.Interface, namespace, name string) (map[permission]bool, error) {
	isSA := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == namespace && s.Name == name
		})
	}
	var refs []rbacv1.RoleRef
	var refNamespaces []string
	cbs, err := client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, b := range cbs.Items {
		if isSA(b.Subjects) {
			refs, refNamespaces = append(refs, b.RoleRef), append(refNamespaces, "")
		}
	}
	rbs, err := client.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, b := range rbs.Items {
		if isSA(b.Subjects) {
			refs, refNamespaces = append(refs, b.RoleRef), append(refNamespaces, b.Namespace)
		}
	}
	granted := map[permission]bool{}
	for i, ref := range refs {
		var rules []rbacv1.PolicyRule
		if ref.Kind == "ClusterRole" {
			r, err := client.RbacV1().ClusterRoles().Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			rules = r.Rules
		} else {
			r, err := client.RbacV1().Roles(refNamespaces[i]).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			rules = r.Rules
		}
		for _, rule := range rules {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						granted[permission{g, res, v}] = true
					}
				}
			}
		}
	}
	return granted, nil
}

// calledBy reads an API server audit log (JSON events, one a line) and
// returns the calls a user made on resources, allowed or not. Requests for
// non-resource URLs (discovery, /version) are left out: every
// authenticated user may make them, whatever a chart grants. A last line
// without its newline is one the API server is still writing, and waits
// for the next read.
func calledBy(log io.Reader, user string) (map[permission]bool, error) {
	used := map[permission]bool{}
	r := bufio.NewReader(log)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return used, nil
		} else if err != nil {
			return nil, err
		}
		var ev auditv1.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("audit log line %d: %w", n, err)
		}
		if ev.User.Username != user || ev.ObjectRef == nil {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		used[permission{ev.ObjectRef.APIGroup, res, ev.Verb}] = true
	}
}

// rbacMismatch says how what a driver called differs from what it is
// granted, "" when they agree: a call not granted, a grant never called
// (unless unexercised names it, with the reason the run cannot call it),
// and an unexercised entry that the run did call or that is not granted.
func rbacMismatch(granted, used map[permission]bool, unexercised map[permission]string) string {
	var lines []string
	add := func(format string, set map[permission]bool, keep func(permission) bool) {
		var ps []string
		for p := range set {
			if keep(p) {
				ps = append(ps, p.String())
			}
		}
		if len(ps) > 0 {
			sort.Strings(ps)
			lines = append(lines, fmt.Sprintf(format, strings.Join(ps, ", ")))
		}
	}
	add("called but not granted: %s", used, func(p permission) bool { return !granted[p] })
	add("granted but never called: %s", granted, func(p permission) bool { _, ok := unexercised[p]; return !used[p] && !ok })
	listed := map[permission]bool{}
	for p := range unexercised {
		listed[p] = true
	}
	add("listed as unexercised but called, drop them from the list: %s", listed, func(p permission) bool { return used[p] })
	add("listed as unexercised but not granted: %s", listed, func(p permission) bool { return !granted[p] })
	return strings.Join(lines, "; ")
}

// A hand-written audit log: the driver's calls, another user's, a
// discovery request and a denied call, as the lab's API server writes them.
const auditSample = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dn1","verb":"list","user":{"username":"system:serviceaccount:dralab-system:drv","groups":["system:serviceaccounts","system:serviceaccounts:dralab-system","system:authenticated"]},"objectRef":{"resource":"resourceslices","apiGroup":"resource.k8s.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a2","stage":"ResponseStarted","requestURI":"/apis/resource.k8s.io/v1/resourceslices?watch=true","verb":"watch","user":{"username":"system:serviceaccount:dralab-system:drv"},"objectRef":{"resource":"resourceslices","apiGroup":"resource.k8s.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a2","stage":"ResponseComplete","requestURI":"/apis/resource.k8s.io/v1/resourceslices?watch=true","verb":"watch","user":{"username":"system:serviceaccount:dralab-system:drv"},"objectRef":{"resource":"resourceslices","apiGroup":"resource.k8s.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a3","stage":"ResponseComplete","requestURI":"/api/v1/nodes/n1","verb":"get","user":{"username":"system:serviceaccount:dralab-system:drv"},"objectRef":{"resource":"nodes","name":"n1","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a4","stage":"ResponseComplete","requestURI":"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1/status","verb":"patch","user":{"username":"system:serviceaccount:dralab-system:drv"},"objectRef":{"resource":"resourceclaims","namespace":"default","name":"c1","apiGroup":"resource.k8s.io","apiVersion":"v1","subresource":"status"},"responseStatus":{"metadata":{},"status":"Failure","reason":"Forbidden","code":403}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a5","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/pods/p1","verb":"delete","user":{"username":"system:serviceaccount:default:app"},"objectRef":{"resource":"pods","namespace":"default","name":"p1","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a6","stage":"ResponseComplete","requestURI":"/apis","verb":"get","user":{"username":"system:serviceaccount:dralab-system:drv"},"responseStatus":{"metadata":{},"code":200}}
`

func TestRBACAgainstAnAuditLog(t *testing.T) {
	used, err := calledBy(strings.NewReader(auditSample), "system:serviceaccount:dralab-system:drv")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"get nodes", "list resourceslices.resource.k8s.io", "patch resourceclaims.resource.k8s.io/status", "watch resourceslices.resource.k8s.io"}
	if got := permissions(used); !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}

	slicesGroup := "resource.k8s.io"
	exact := map[permission]bool{{"", "nodes", "get"}: true, {slicesGroup, "resourceslices", "list"}: true, {slicesGroup, "resourceslices", "watch"}: true,
		{slicesGroup, "resourceclaims/status", "patch"}: true}
	if msg := rbacMismatch(exact, used, nil); msg != "" {
		t.Errorf("exact grants: %s", msg)
	}
	shutdown := permission{slicesGroup, "resourceslices", "delete"}
	if msg := rbacMismatch(map[permission]bool{{"", "nodes", "get"}: true, {slicesGroup, "resourceslices", "list"}: true, {slicesGroup, "resourceslices", "watch"}: true, shutdown: true},
		map[permission]bool{{"", "nodes", "get"}: true, {slicesGroup, "resourceslices", "list"}: true, {slicesGroup, "resourceslices", "watch"}: true},
		map[permission]string{shutdown: "only on shutdown"}); msg != "" {
		t.Errorf("a grant listed as unexercised: %s", msg)
	}

	granted := map[permission]bool{{"", "nodes", "get"}: true, {slicesGroup, "resourceslices", "list"}: true, {slicesGroup, "resourceslices", "watch"}: true,
		{slicesGroup, "resourceslices", "deletecollection"}: true, shutdown: true}
	unexercised := map[permission]string{shutdown: "only on shutdown", {"", "nodes", "get"}: "stale", {slicesGroup, "resourceclaims", "update"}: "never granted"}
	wantMsg := "called but not granted: patch resourceclaims.resource.k8s.io/status; " +
		"granted but never called: deletecollection resourceslices.resource.k8s.io; " +
		"listed as unexercised but called, drop them from the list: get nodes; " +
		"listed as unexercised but not granted: update resourceclaims.resource.k8s.io"
	if msg := rbacMismatch(granted, used, unexercised); msg != wantMsg {
		t.Errorf("mismatch =\n%s\nwant\n%s", msg, wantMsg)
	}

	if _, err := calledBy(strings.NewReader(auditSample+"{not json\n"), "u"); err == nil || !strings.Contains(err.Error(), "audit log line 8") {
		t.Errorf("a broken line: err = %v", err)
	}
	writing := auditSample + strings.Replace(strings.SplitAfter(auditSample, "\n")[0], `"list"`, `"create"`, 1)
	if more, err := calledBy(strings.NewReader(writing[:len(writing)-40]), "system:serviceaccount:dralab-system:drv"); err != nil || len(more) != len(used) {
		t.Errorf("a line being written: calls %v, err %v; want the complete lines' %v", permissions(more), err, permissions(used))
	}
}
