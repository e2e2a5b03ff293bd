package drametrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/internal/kubeclient"
)

// Read reads, live, what a cluster's components count about claims: each
// node's kubelet (its DRA operations and claims in use, through the API
// server's node proxy), the scheduler's DynamicResources plugin (where
// the scheduler serves them: readScheduler) and, through drivers (nil: none), the metrics addresses
// of each node's drivers by driver name. A part that cannot be read is an
// error in the snapshot, not a failure of the whole.
func Read(ctx context.Context, kubeconfig string, nodes []string, drivers func(node string) (map[string]string, error)) (*Snapshot, error) {
	client, err := kubeclient.New(kubeconfig)
	if err != nil {
		return nil, err
	}
	rest := client.CoreV1().RESTClient()
	snap := &Snapshot{}
	snap.Scheduler, snap.SchedulerErr = readScheduler(ctx, client)
	httpClient := &http.Client{Timeout: 10 * time.Second}
	for _, name := range nodes {
		node := Node{Name: name, Drivers: map[string]Driver{}, DriverErrs: map[string]error{}}
		source := "node " + name + "'s kubelet /metrics"
		if body, err := rest.Get().AbsPath("/api/v1/nodes", name, "proxy", "metrics").DoRaw(ctx); err != nil {
			node.KubeletErr = fmt.Errorf("reading %s: %w", source, err)
		} else {
			node.Kubelet, node.KubeletErr = ParseKubelet(bytes.NewReader(body), source)
		}
		if drivers != nil {
			addresses, err := drivers(name)
			if err != nil {
				return nil, err
			}
			for driver, address := range addresses {
				d, err := driverMetrics(ctx, httpClient, address, name, driver)
				if err != nil {
					node.DriverErrs[driver] = err
					continue
				}
				node.Drivers[driver] = d
			}
		}
		snap.Nodes = append(snap.Nodes, node)
	}
	return snap, nil
}

func driverMetrics(ctx context.Context, client *http.Client, address, node, driver string) (Driver, error) {
	source := fmt.Sprintf("node %s's %s driver, http://%s/metrics", node, driver, address)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+address+"/metrics", nil)
	if err != nil {
		return Driver{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Driver{}, fmt.Errorf("reading %s: %w", source, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Driver{}, fmt.Errorf("reading %s: %s", source, resp.Status)
	}
	return ParseDriver(resp.Body, source)
}

// schedulerPort is where kubeadm's kube-scheduler serves /metrics (HTTPS).
const schedulerPort = "10259"

// readScheduler reads the scheduler's DynamicResources metrics where the
// cluster's scheduler serves them: a scheduler that runs as a pod (kubeadm's
// static pod, kind's nodes) through the API server's proxy to the pod,
// each one's added up; the embedded lab's, in the API server's process,
// from the control plane's /metrics.
func readScheduler(ctx context.Context, client kubernetes.Interface) (Scheduler, error) {
	rest := client.CoreV1().RESTClient()
	pods, err := client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=kube-scheduler"})
	if err != nil || len(pods.Items) == 0 {
		body, err := rest.Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return Scheduler{}, fmt.Errorf("reading the control plane's /metrics: %w", err)
		}
		return ParseScheduler(bytes.NewReader(body), "the control plane's /metrics")
	}
	sum := Scheduler{Evaluations: map[string]float64{}, Durations: map[string]Timing{}}
	var errs []error
	for _, p := range pods.Items {
		if p.Status.Phase != v1.PodRunning {
			continue
		}
		source := "scheduler pod " + p.Name + "'s /metrics"
		body, err := rest.Get().Namespace(p.Namespace).Resource("pods").Name("https:" + p.Name + ":" + schedulerPort).SubResource("proxy").Suffix("metrics").DoRaw(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", source, err))
			continue
		}
		s, err := ParseScheduler(bytes.NewReader(body), source)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for k, v := range s.Evaluations {
			sum.Evaluations[k] += v
		}
		for k, v := range s.Durations {
			sum.Durations[k] = add(sum.Durations[k], v)
		}
	}
	return sum, errors.Join(errs...)
}
