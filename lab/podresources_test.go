package lab_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/drametrics"
	"github.com/dralab/dralab/internal/podresources"
	"github.com/dralab/dralab/lab"
)

// assertObservability runs a pod with a GPU claim and asks its node's
// kubelet, through the podresources API, what the container got: the
// claim's allocated device, with the CDI device the driver prepared for
// the claim; an unknown node is an error naming the lab's nodes. The
// lab's metrics move with the pod: its node's kubelet prepared again and
// has a claim in use, its GPU driver was asked to prepare again and holds
// it, the scheduler's DRA plugin evaluated it.
func assertObservability(ctx context.Context, t *testing.T, l *lab.Lab) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	before, err := drametrics.Read(ctx, l.Kubeconfig(), l.NodeNames(), l.DriverMetrics)
	if err != nil {
		t.Fatal(err)
	}
	defer claimPod(ctx, t, client, "watched")(context.WithoutCancel(ctx))
	var pod *v1.Pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pod, err = client.CoreV1().Pods("default").Get(ctx, "watched", metav1.GetOptions{})
		return err == nil && pod.Status.Phase == v1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("the pod with a GPU claim did not run within a minute: %v", err)
	}
	claim, err := client.ResourceV1().ResourceClaims("default").Get(ctx, "watched", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkPodResources(ctx, t, l, pod.Spec.NodeName, "watched", "app", claim)
	if _, err := l.PodResourcesSocket("n9"); err == nil || !strings.Contains(err.Error(), "n1, n2") {
		t.Errorf("PodResourcesSocket(n9) = %v, want an error naming the nodes", err)
	}

	after, err := drametrics.Read(ctx, l.Kubeconfig(), l.NodeNames(), l.DriverMetrics)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := drametrics.Write(&out, after); err != nil {
		t.Fatal(err)
	}
	t.Logf("lab:metrics after the pod:\n%s", out.String())
	b, a := nodeMetrics(t, before, pod.Spec.NodeName), nodeMetrics(t, after, pod.Spec.NodeName)
	// More, not exactly one more: one run of several counted two prepares
	// for this pod on its node, the kubelet's and the driver's alike.
	if a.Kubelet.Prepare.Count <= b.Kubelet.Prepare.Count || a.Kubelet.ClaimsInUse[drametrics.AnyDriver] < 1 || a.Kubelet.ClaimsInUse[gpu.DriverName] < 1 {
		t.Errorf("node %s's kubelet: prepares %d → %d, claims in use %v; want more prepares and the claim in use", pod.Spec.NodeName, b.Kubelet.Prepare.Count, a.Kubelet.Prepare.Count, a.Kubelet.ClaimsInUse)
	}
	if a.Drivers[gpu.DriverName].Prepares <= b.Drivers[gpu.DriverName].Prepares || a.Drivers[gpu.DriverName].Prepared < 1 {
		t.Errorf("node %s's GPU driver: prepares %v → %v, prepared now %v; want more, and the claim held (errors: %v)", pod.Spec.NodeName,
			b.Drivers[gpu.DriverName].Prepares, a.Drivers[gpu.DriverName].Prepares, a.Drivers[gpu.DriverName].Prepared, a.DriverErrs)
	}
	if after.SchedulerErr != nil || after.Scheduler.Evaluations["Filter"] <= before.Scheduler.Evaluations["Filter"] {
		t.Errorf("the scheduler's DynamicResources Filter evaluations %v → %v (%v); want more", before.Scheduler.Evaluations, after.Scheduler.Evaluations, after.SchedulerErr)
	}
}

func nodeMetrics(t *testing.T, s *drametrics.Snapshot, name string) drametrics.Node {
	t.Helper()
	for _, n := range s.Nodes {
		if n.Name == name {
			if n.KubeletErr != nil {
				t.Fatalf("node %s: %v", name, n.KubeletErr)
			}
			return n
		}
	}
	t.Fatalf("lab:metrics has no node %s", name)
	return drametrics.Node{}
}

// checkPodResources asks node's kubelet, through the podresources API,
// what pod (in default) got: its container lists the claim's one allocated
// device, with the CDI device the driver prepared for the claim.
func checkPodResources(ctx context.Context, t *testing.T, l *lab.Lab, node, pod, container string, claim *resourceapi.ResourceClaim) {
	t.Helper()
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s: allocation %+v, want one device", claim.Name, claim.Status.Allocation)
	}
	got := claim.Status.Allocation.Devices.Results[0]
	socket, err := l.PodResourcesSocket(node)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := podresources.List(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	var mine []podresources.Row
	for _, r := range rows {
		if r.Namespace == "default" && r.Pod == pod {
			mine = append(mine, r)
		}
	}
	if len(mine) != 1 || mine[0].Container != container || mine[0].Claim != "default/"+claim.Name ||
		mine[0].Driver != got.Driver || mine[0].Pool != got.Pool || mine[0].Device != got.Device ||
		!slices.ContainsFunc(mine[0].CDI, func(id string) bool { return strings.HasSuffix(id, "="+string(claim.UID)+"-"+got.Device) }) {
		t.Errorf("the kubelet of %s lists for pod %s %+v; its claim %s holds %s/%s/%s", node, pod, mine, claim.Name, got.Driver, got.Pool, got.Device)
	}
	t.Logf("the kubelet of %s lists for pod %s: %+v", node, pod, mine)
}
