package conformance

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/lab"
)

// TestFeaturesOnLab runs every feature for the fake GPU driver on an
// embedded lab, after an interrupted run left a namespace and a rule
// tainting every device of the driver, beside look-alikes that are not the
// suite's. The features pass (the opaque-config one on the kubelet's
// FailedPrepareDynamicResources event), the leftovers are gone before
// them, the look-alikes stay, every rule the run creates names one device
// by driver, pool and name, every object it creates is labelled, and none
// is left afterwards.
func TestFeaturesOnLab(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded lab: run without -short")
	}
	ctx := context.Background()
	l, restConfig := startLab(t, "t-cluster")
	client := kubernetes.NewForConfigOrDie(restConfig)
	// The lab is shaped as clusters that are not ours: no node's hostname
	// label is its name, so a check that pinned pods by the label fails.
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if got, want := n.Labels[v1.LabelHostname], scratchlab.HostnameLabel(n.Name); got != want {
			t.Fatalf("node %s has hostname label %q; want %q, not its name", n.Name, got, want)
		}
	}
	m, err := manifest.Load("../../drivers/fakegpu/driver.yaml")
	if err != nil {
		t.Fatal(err)
	}

	interrupted := map[string]string{cluster.LabelManagedBy: cluster.ManagedBy, cluster.LabelRun: "interrupted"}
	seed := []struct {
		create func() error
		name   string
	}{
		{name: "conformance-interrupted", create: func() error {
			_, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "conformance-interrupted", Labels: interrupted}}, metav1.CreateOptions{})
			return err
		}},
		{name: "conformance-lookalike", create: func() error {
			_, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "conformance-lookalike"}}, metav1.CreateOptions{})
			return err
		}},
		// Left by an interrupted run: every device of the driver tainted.
		{name: "conformance-interrupted", create: func() error {
			_, err := client.ResourceV1().DeviceTaintRules().Create(ctx, &resourceapi.DeviceTaintRule{
				ObjectMeta: metav1.ObjectMeta{Name: "conformance-interrupted", Labels: interrupted},
				Spec: resourceapi.DeviceTaintRuleSpec{
					DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(m.Driver)},
					Taint:          resourceapi.DeviceTaint{Key: cluster.TaintKey, Effect: resourceapi.DeviceTaintEffectNoSchedule},
				},
			}, metav1.CreateOptions{})
			return err
		}},
		// Someone's maintenance, of a device that does not exist.
		{name: "maintenance", create: func() error {
			_, err := client.ResourceV1().DeviceTaintRules().Create(ctx, &resourceapi.DeviceTaintRule{
				ObjectMeta: metav1.ObjectMeta{Name: "maintenance"},
				Spec: resourceapi.DeviceTaintRuleSpec{
					DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(m.Driver), Pool: ptr.To("no-such-pool"), Device: ptr.To("no-such-device")},
					Taint:          resourceapi.DeviceTaint{Key: "example.com/maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule},
				},
			}, metav1.CreateOptions{})
			return err
		}},
	}
	for _, s := range seed {
		if err := s.create(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}

	created := watchCreated(ctx, t, client)
	testenv := env.NewWithConfig(envconf.New().WithKubeconfigFile(l.Kubeconfig()))
	co, err := scratchlab.ClusterOptions(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Test(t, cluster.Features(m, co)...)
	namespaces, rules := created()

	if _, err := client.ResourceV1().DeviceTaintRules().Get(ctx, "conformance-interrupted", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the interrupted run's DeviceTaintRule remains: %v", err)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, "conformance-interrupted", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the interrupted run's namespace remains: %v", err)
	}
	if _, err := client.ResourceV1().DeviceTaintRules().Get(ctx, "maintenance", metav1.GetOptions{}); err != nil {
		t.Errorf("a DeviceTaintRule without the suite's label: %v", err)
	}
	if ns, err := client.CoreV1().Namespaces().Get(ctx, "conformance-lookalike", metav1.GetOptions{}); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("a namespace without the suite's label: %v, %v", ns, err)
	}

	resourceSlices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + m.Driver})
	if err != nil {
		t.Fatal(err)
	}
	published := map[string]bool{}
	for _, s := range resourceSlices.Items {
		for _, d := range s.Spec.Devices {
			published[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+d.Name] = true
		}
	}
	if len(rules) == 0 {
		t.Error("the run created no DeviceTaintRule: the device-taints feature did not run")
	}
	for _, r := range rules {
		sel := r.Spec.DeviceSelector
		if sel == nil || sel.Driver == nil || sel.Pool == nil || sel.Device == nil {
			t.Errorf("DeviceTaintRule %s selects %v: want one device, by driver, pool and name", r.Name, sel)
		} else if d := *sel.Driver + "/" + *sel.Pool + "/" + *sel.Device; !published[d] {
			t.Errorf("DeviceTaintRule %s taints %s, which the driver does not publish", r.Name, d)
		}
		if r.Labels[cluster.LabelManagedBy] != cluster.ManagedBy || r.Labels[cluster.LabelRun] == "" {
			t.Errorf("DeviceTaintRule %s is labelled %v", r.Name, r.Labels)
		}
	}
	if len(namespaces) == 0 {
		t.Error("the run created no namespace")
	}
	for _, ns := range namespaces {
		if ns.Labels[cluster.LabelManagedBy] != cluster.ManagedBy || ns.Labels[cluster.LabelRun] == "" {
			t.Errorf("namespace %s is labelled %v", ns.Name, ns.Labels)
		}
	}

	// Namespaces go asynchronously, their pods and claims with them.
	var (
		left    []string
		lastErr error
	)
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		suite := metav1.ListOptions{LabelSelector: cluster.LabelManagedBy + "=" + cluster.ManagedBy}
		nss, err := client.CoreV1().Namespaces().List(ctx, suite)
		if err != nil {
			lastErr = err
			return false, nil
		}
		rules, err := client.ResourceV1().DeviceTaintRules().List(ctx, suite)
		if err != nil {
			lastErr = err
			return false, nil
		}
		left = nil
		for _, ns := range nss.Items {
			left = append(left, "namespace "+ns.Name)
		}
		for _, r := range rules.Items {
			left = append(left, "DeviceTaintRule "+r.Name)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("waited 2m for the run's objects to be gone; %v remain: %v (last error: %v)", left, err, lastErr)
	}
}

// watchCreated records the namespaces and DeviceTaintRules created from
// now on, until the returned function is called.
func watchCreated(ctx context.Context, t *testing.T, client kubernetes.Interface) func() ([]v1.Namespace, []resourceapi.DeviceTaintRule) {
	t.Helper()
	nsWatch, err := client.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ruleWatch, err := client.ResourceV1().DeviceTaintRules().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		namespaces []v1.Namespace
		rules      []resourceapi.DeviceTaintRule
		wg         sync.WaitGroup
	)
	// The watches start with what exists: the seeded objects and the
	// lab's own namespaces are skipped by name.
	existing := map[string]bool{"conformance-interrupted": true, "conformance-lookalike": true, "maintenance": true}
	nss, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss.Items {
		existing[ns.Name] = true
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for e := range nsWatch.ResultChan() {
			if ns, ok := e.Object.(*v1.Namespace); ok && e.Type == watch.Added && !existing[ns.Name] {
				mu.Lock()
				namespaces = append(namespaces, *ns)
				mu.Unlock()
			}
		}
	}()
	go func() {
		defer wg.Done()
		for e := range ruleWatch.ResultChan() {
			if r, ok := e.Object.(*resourceapi.DeviceTaintRule); ok && e.Type == watch.Added && !existing[r.Name] {
				mu.Lock()
				rules = append(rules, *r)
				mu.Unlock()
			}
		}
	}()
	return func() ([]v1.Namespace, []resourceapi.DeviceTaintRule) {
		nsWatch.Stop()
		ruleWatch.Stop()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return namespaces, rules
	}
}

// startLab starts the conformance lab (scratchlab.ConformanceConfig) under
// name for a test, deleted when the test ends, and returns it with its
// client configuration.
func startLab(t *testing.T, name string) (*lab.Lab, *rest.Config) {
	t.Helper()
	cfg, err := scratchlab.ConformanceConfig()
	if err != nil {
		t.Fatal(err)
	}
	l, err := scratchlab.Start(context.Background(), cfg, name)
	t.Cleanup(func() {
		if err := scratchlab.Stop(context.Background(), l); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	restConfig, err := l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	return l, restConfig
}

// TestClusterWithoutDeviceTaintRules runs the fake GPU driver's manifest,
// cluster layer only, on a conformance lab that neither serves
// resource.k8s.io/v1 DeviceTaintRules nor enforces them (the resource
// switched off, the DRADeviceTaintRules gate off): every check passes but
// the device-taints one, which is not verified and names what the cluster
// lacks. The suite judges the driver, not the cluster's shape.
func TestClusterWithoutDeviceTaintRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded lab: run without -short")
	}
	cfg, err := scratchlab.ConformanceConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = "t-no-taint-rules"
	cfg.FeatureGates["DRADeviceTaintRules"] = false
	cfg.RuntimeConfig["resource.k8s.io/v1/devicetaintrules"] = "false"
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	o := conformance.Options{Manifest: defaultManifest, Layer: conformance.LayerCluster}
	report, err := scratchlab.Conformance(context.Background(), o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", report.Summary())
	taints := 0
	for _, c := range report.Cases {
		switch {
		case strings.HasSuffix(c.Name, "/device taints"):
			taints++
			if c.Status != results.Failed || !strings.HasPrefix(c.Message, results.UnverifiedPrefix) || !strings.Contains(c.Message, "does not serve DeviceTaintRules in resource.k8s.io/v1") {
				t.Errorf("%s: %s %q; want failed as not verified, naming the DeviceTaintRules the cluster does not serve", c.Name, c.Status, c.Message)
			}
		case c.Status == results.Skipped && strings.Contains(c.Message, "the manifest does not enable"):
		case c.Status != results.Passed:
			t.Errorf("%s: %s %q; want passed", c.Name, c.Status, c.Message)
		}
	}
	if taints != 1 {
		t.Errorf("the report has %d device-taints cases; want 1", taints)
	}
}
