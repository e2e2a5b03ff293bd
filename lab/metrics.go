package lab

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/dralab/dralab/internal/drametrics"
	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/lab/internal/backend"
)

// Metrics reads what the lab's components count about claims, live: each
// node's kubelet (its DRA operations and claims in use, through the API
// server's node proxy), the scheduler's DynamicResources plugin (the
// control plane's /metrics, where the embedded lab's in-process scheduler
// registers them) and, where the backend records their addresses, the
// drivers' own prepare calls. A part that cannot be read is an error in
// the snapshot, not a failure of the whole.
func (l *Lab) Metrics(ctx context.Context) (*drametrics.Snapshot, error) {
	client, err := kubeclient.New(l.Kubeconfig())
	if err != nil {
		return nil, err
	}
	rest := client.CoreV1().RESTClient()
	snap := &drametrics.Snapshot{}
	if body, err := rest.Get().AbsPath("/metrics").DoRaw(ctx); err != nil {
		snap.SchedulerErr = fmt.Errorf("reading the control plane's /metrics: %w", err)
	} else {
		snap.Scheduler, snap.SchedulerErr = drametrics.ParseScheduler(bytes.NewReader(body), "the control plane's /metrics")
	}
	dm, _ := l.backend.(backend.DriverMetricser)
	httpClient := &http.Client{Timeout: 10 * time.Second}
	for _, n := range l.cfg.Nodes {
		node := drametrics.Node{Name: n.Name, Drivers: map[string]drametrics.Driver{}, DriverErrs: map[string]error{}}
		source := "node " + n.Name + "'s kubelet /metrics"
		if body, err := rest.Get().AbsPath("/api/v1/nodes", n.Name, "proxy", "metrics").DoRaw(ctx); err != nil {
			node.KubeletErr = fmt.Errorf("reading %s: %w", source, err)
		} else {
			node.Kubelet, node.KubeletErr = drametrics.ParseKubelet(bytes.NewReader(body), source)
		}
		if dm != nil {
			addresses, err := dm.DriverMetrics(l.cfg.Name, n.Name)
			if err != nil {
				return nil, err
			}
			for driver, address := range addresses {
				d, err := driverMetrics(ctx, httpClient, address, n.Name, driver)
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

func driverMetrics(ctx context.Context, client *http.Client, address, node, driver string) (drametrics.Driver, error) {
	source := fmt.Sprintf("node %s's %s driver, http://%s/metrics", node, driver, address)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+address+"/metrics", nil)
	if err != nil {
		return drametrics.Driver{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return drametrics.Driver{}, fmt.Errorf("reading %s: %w", source, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return drametrics.Driver{}, fmt.Errorf("reading %s: %s", source, resp.Status)
	}
	return drametrics.ParseDriver(resp.Body, source)
}
