package lab_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The lab's featureGates and runtimeConfig reach every component: the API
// server serves the Workload API and keeps a group's fields, the scheduler
// schedules a gang whole or not at all, every kubelet has the gates (its
// configz), and lab:status shows them.
func TestFeatureGatesReachEveryComponent(t *testing.T) {
	bin := binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := smallConfig("gates", "n1")
	cfg.FeatureGates = map[string]bool{"GenericWorkload": true, "DRAWorkloadResourceClaims": true}
	cfg.RuntimeConfig = map[string]string{"scheduling.k8s.io/v1beta1": "true"}
	l, _, client := upLab(ctx, t, stateRoot(t), bin, cfg)

	// The API server: the group version, served.
	resources, err := client.Discovery().ServerResourcesForGroupVersion("scheduling.k8s.io/v1beta1")
	if err != nil {
		t.Fatalf("scheduling.k8s.io/v1beta1 is not served: %v", err)
	}
	var names []string
	for _, r := range resources.APIResources {
		names = append(names, r.Name)
	}
	if !slices.Contains(names, "podgroups") || !slices.Contains(names, "workloads") {
		t.Errorf("scheduling.k8s.io/v1beta1 serves %v, want podgroups and workloads", names)
	}

	// Every kubelet.
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/n1/proxy/configz").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var configz struct {
		Kubelet struct {
			FeatureGates map[string]bool `json:"featureGates"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &configz); err != nil {
		t.Fatalf("configz %s: %v", raw, err)
	}
	if !configz.Kubelet.FeatureGates["GenericWorkload"] || !configz.Kubelet.FeatureGates["DRAWorkloadResourceClaims"] {
		t.Errorf("n1's kubelet has feature gates %v", configz.Kubelet.FeatureGates)
	}

	// The scheduler: a gang of two waits whole while one pod of it exists,
	// beside a pod of no group that schedules, and binds once both do.
	const ns = "default"
	group := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "train"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2},
		}},
	}
	if _, err := client.SchedulingV1beta1().PodGroups(ns).Create(ctx, group, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, group string) *v1.Pod {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}
		if group != "" {
			p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
		return p
	}
	for _, p := range []*v1.Pod{pod("worker-0", "train"), pod("alone", "")} {
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitScheduled(ctx, t, client, ns, "alone")
	if p, err := client.CoreV1().Pods(ns).Get(ctx, "worker-0", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if p.Spec.SchedulingGroup == nil {
		t.Fatalf("the API server dropped worker-0's schedulingGroup")
	} else if p.Spec.NodeName != "" {
		t.Fatalf("worker-0 bound to %s alone, though its gang needs 2 pods", p.Spec.NodeName)
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod("worker-1", "train"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitScheduled(ctx, t, client, ns, "worker-0")
	waitScheduled(ctx, t, client, ns, "worker-1")

	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.FeatureGates != "DRAWorkloadResourceClaims=true,GenericWorkload=true" || st.RuntimeConfig != "scheduling.k8s.io/v1beta1=true" {
		t.Errorf("status shows gates %q and runtime config %q", st.FeatureGates, st.RuntimeConfig)
	}
}

// waitScheduled waits until the scheduler has bound a pod to a node.
func waitScheduled(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not bound: %v", ns, name, err)
	}
}
