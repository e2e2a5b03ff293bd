package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/dralab/dralab/drivers/conformance/cluster"
)

// TestKubeletPlugin proves the embedded lab's DRA path end to end with a
// plugin the test itself serves: the real scheduler allocates its device,
// the hollow node's real kubelet DRA manager calls NodePrepareResources,
// the fake runtime injects the CDI spec into the container's environment,
// and deleting the pod calls NodeUnprepareResources.
func TestKubeletPlugin(t *testing.T) {
	requireCluster(t)
	const driver = "test.dralab.dev"
	type key struct{}
	type state struct {
		client    kubernetes.Interface
		plugin    *testPlugin
		node      string
		namespace string
		claimUID  types.UID
	}
	get := func(ctx context.Context) *state { return ctx.Value(key{}).(*state) }

	f := features.New("kubelet plugin on a hollow node").
		WithLabel("lab", "embedded").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if theLab == nil {
				t.Skip("needs the embedded lab: the test plugin serves its sockets in the node's directories on this host")
			}
			st, err := theLab.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			node := st.Nodes[len(st.Nodes)-1]
			client, err := kubernetes.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			plugin, err := startTestPlugin(ctx, client, driver, node, []string{"dev-0"})
			if err != nil {
				t.Fatal(err)
			}
			s := &state{client: client, plugin: plugin, node: node.Name, namespace: envconf.RandomName("kubelet-plugin", 24)}
			t.Cleanup(plugin.stop)
			if err := cluster.CreateNamespace(ctx, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.namespace}}); err != nil {
				t.Fatal(err)
			}
			class := &resourceapi.DeviceClass{
				ObjectMeta: metav1.ObjectMeta{Name: driver},
				Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
					{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}},
				}},
			}
			if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			template := &resourceapi.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: "one-device", Namespace: s.namespace},
				Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
					Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
						Name:    "dev",
						Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: driver},
					}}},
				}},
			}
			if _, err := client.ResourceV1().ResourceClaimTemplates(s.namespace).Create(ctx, template, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			return context.WithValue(ctx, key{}, s)
		}).
		Assess("the pod runs on the plugin's node with its device prepared", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			s := get(ctx)
			pod := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "consumer", Namespace: s.namespace},
				Spec: v1.PodSpec{
					Containers: []v1.Container{{
						Name: "ctr", Image: "registry.k8s.io/pause:3.10",
						Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "dev"}}},
					}},
					ResourceClaims: []v1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To("one-device")}},
				},
			}
			if _, err := s.client.CoreV1().Pods(s.namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := wait.For(conditions.New(cfg.Client().Resources()).PodRunning(pod), wait.WithTimeout(time.Minute)); err != nil {
				t.Fatalf("pod did not run: %v", err)
			}
			got, err := s.client.CoreV1().Pods(s.namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Spec.NodeName != s.node {
				t.Errorf("pod runs on node %q, want %q, the only node with the plugin's device", got.Spec.NodeName, s.node)
			}
			if len(got.Status.ResourceClaimStatuses) != 1 || got.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
				t.Fatalf("pod's resource claim statuses: %+v", got.Status.ResourceClaimStatuses)
			}
			claim, err := s.client.ResourceV1().ResourceClaims(s.namespace).Get(ctx, *got.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
				t.Fatalf("claim %s is not allocated one device: %+v", claim.Name, claim.Status.Allocation)
			}
			r := claim.Status.Allocation.Devices.Results[0]
			if r.Driver != driver || r.Pool != s.node || r.Device != "dev-0" || r.Request != "dev" {
				t.Errorf("allocation result = %s/%s/%s for request %s, want %s/%s/dev-0 for request dev", r.Driver, r.Pool, r.Device, r.Request, driver, s.node)
			}
			s.claimUID = claim.UID
			if prepared, _ := s.plugin.calls(claim.UID); prepared == 0 {
				t.Errorf("the kubelet never called NodePrepareResources for claim %s", claim.Name)
			}
			return ctx
		}).
		Assess("the container's environment has the CDI spec's variable", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			s := get(ctx)
			logs, err := s.client.CoreV1().Pods(s.namespace).GetLogs("consumer", &v1.PodLogOptions{Container: "ctr"}).DoRaw(ctx)
			if err != nil {
				t.Fatalf("reading the container's log through the API server and kubelet: %v", err)
			}
			want := testEnvVar + "=dev-0"
			if !containsLine(string(logs), want) {
				t.Errorf("container environment lacks %s; log:\n%s", want, logs)
			}
			return ctx
		}).
		Assess("deleting the pod unprepares the claim", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			s := get(ctx)
			if err := s.client.CoreV1().Pods(s.namespace).Delete(ctx, "consumer", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			err := wait.For(func(context.Context) (bool, error) {
				_, unprepared := s.plugin.calls(s.claimUID)
				return unprepared > 0, nil
			}, wait.WithTimeout(time.Minute), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Errorf("the kubelet never called NodeUnprepareResources for claim %s: %v", s.claimUID, err)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			s, ok := ctx.Value(key{}).(*state)
			if !ok {
				return ctx
			}
			if t.Failed() {
				dumpDiagnostics(ctx, t, theLab, s.client, s.namespace)
			}
			deleteNamespace(ctx, t, s.client, s.namespace)
			_ = s.client.ResourceV1().DeviceClasses().Delete(ctx, driver, metav1.DeleteOptions{})
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}
