package drametrics

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/dralab/dralab/internal/kubeclient"
)

// Read reads, live, what a cluster's components count about claims: each
// node's kubelet (its DRA operations and claims in use, through the API
// server's node proxy), the scheduler's DynamicResources plugin (the
// control plane's /metrics, where the embedded lab's in-process scheduler
// registers them) and, through drivers (nil: none), the metrics addresses
// of each node's drivers by driver name. A part that cannot be read is an
// error in the snapshot, not a failure of the whole.
func Read(ctx context.Context, kubeconfig string, nodes []string, drivers func(node string) (map[string]string, error)) (*Snapshot, error) {
	client, err := kubeclient.New(kubeconfig)
	if err != nil {
		return nil, err
	}
	rest := client.CoreV1().RESTClient()
	snap := &Snapshot{}
	if body, err := rest.Get().AbsPath("/metrics").DoRaw(ctx); err != nil {
		snap.SchedulerErr = fmt.Errorf("reading the control plane's /metrics: %w", err)
	} else {
		snap.Scheduler, snap.SchedulerErr = ParseScheduler(bytes.NewReader(body), "the control plane's /metrics")
	}
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
