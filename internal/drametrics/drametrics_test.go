package drametrics

import (
	"bytes"
	"strings"
	"testing"
)

const kubelet = `# HELP dra_operations_duration_seconds [ALPHA] Latency histogram in seconds for the duration of handling all ResourceClaims referenced by a pod when the pod starts or stops.
# TYPE dra_operations_duration_seconds histogram
dra_operations_duration_seconds_bucket{is_error="false",operation_name="PrepareResources",le="+Inf"} 4
dra_operations_duration_seconds_sum{is_error="false",operation_name="PrepareResources"} 0.02
dra_operations_duration_seconds_count{is_error="false",operation_name="PrepareResources"} 4
dra_operations_duration_seconds_bucket{is_error="true",operation_name="PrepareResources",le="+Inf"} 1
dra_operations_duration_seconds_sum{is_error="true",operation_name="PrepareResources"} 0.5
dra_operations_duration_seconds_count{is_error="true",operation_name="PrepareResources"} 1
dra_operations_duration_seconds_bucket{is_error="false",operation_name="UnprepareResources",le="+Inf"} 2
dra_operations_duration_seconds_sum{is_error="false",operation_name="UnprepareResources"} 0.004
dra_operations_duration_seconds_count{is_error="false",operation_name="UnprepareResources"} 2
# HELP dra_resource_claims_in_use [ALPHA] The number of ResourceClaims that are currently in use on the node.
# TYPE dra_resource_claims_in_use gauge
dra_resource_claims_in_use{driver_name="<any>"} 2
dra_resource_claims_in_use{driver_name="gpu.dralab.dev"} 2
dra_resource_claims_in_use{driver_name="nic.dralab.dev"} 1
# HELP kubelet_running_pods [ALPHA] Number of pods
# TYPE kubelet_running_pods gauge
kubelet_running_pods 3
`

const scheduler = `# TYPE scheduler_plugin_evaluation_total counter
scheduler_plugin_evaluation_total{extension_point="Filter",plugin="DynamicResources",profile="default-scheduler"} 10
scheduler_plugin_evaluation_total{extension_point="PreFilter",plugin="DynamicResources",profile="default-scheduler"} 5
scheduler_plugin_evaluation_total{extension_point="Filter",plugin="NodeName",profile="default-scheduler"} 10
# TYPE scheduler_plugin_execution_duration_seconds histogram
scheduler_plugin_execution_duration_seconds_bucket{extension_point="PreFilter",plugin="DynamicResources",status="Success",le="+Inf"} 1
scheduler_plugin_execution_duration_seconds_sum{extension_point="PreFilter",plugin="DynamicResources",status="Success"} 0.002
scheduler_plugin_execution_duration_seconds_count{extension_point="PreFilter",plugin="DynamicResources",status="Success"} 1
`

const driver = `# TYPE dralab_driver_claim_operations_total counter
dralab_driver_claim_operations_total{driver="gpu.dralab.dev",operation="prepare"} 7
dralab_driver_claim_operations_total{driver="gpu.dralab.dev",operation="unprepare"} 5
# TYPE dralab_driver_claim_operation_errors_total counter
dralab_driver_claim_operation_errors_total{driver="gpu.dralab.dev",operation="prepare"} 1
dralab_driver_claim_operation_errors_total{driver="gpu.dralab.dev",operation="unprepare"} 0
# TYPE dralab_driver_prepared_claims gauge
dralab_driver_prepared_claims{driver="gpu.dralab.dev"} 2
`

func TestParse(t *testing.T) {
	k, err := ParseKubelet(strings.NewReader(kubelet), "n1's kubelet")
	if err != nil {
		t.Fatal(err)
	}
	if k.Prepare != (Timing{Count: 5, Sum: 0.52}) || k.Unprepare != (Timing{Count: 2, Sum: 0.004}) || k.Errors != 1 ||
		k.ClaimsInUse[AnyDriver] != 2 || k.ClaimsInUse["nic.dralab.dev"] != 1 {
		t.Errorf("kubelet = %+v", k)
	}
	s, err := ParseScheduler(strings.NewReader(scheduler), "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	if s.Evaluations["Filter"] != 10 || s.Evaluations["PreFilter"] != 5 || len(s.Evaluations) != 2 || s.Durations["PreFilter"].Count != 1 {
		t.Errorf("scheduler = %+v", s)
	}
	d, err := ParseDriver(strings.NewReader(driver), "driver")
	if err != nil {
		t.Fatal(err)
	}
	if d != (Driver{Prepares: 7, Unprepares: 5, Errors: 1, Prepared: 2}) {
		t.Errorf("driver = %+v", d)
	}
	if _, err := ParseKubelet(strings.NewReader("dra_operations_duration_seconds{ 1\n"), "n2's kubelet"); err == nil || !strings.Contains(err.Error(), "n2's kubelet") {
		t.Errorf("a malformed page: %v, want an error naming its source", err)
	}

	var out bytes.Buffer
	snap := &Snapshot{Scheduler: s, Nodes: []Node{{Name: "n1", Kubelet: k, Drivers: map[string]Driver{"gpu.dralab.dev": d}}}}
	if err := Write(&out, snap); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "n1 5, mean 104.0ms 2, mean 2.0ms 1 2 (gpu.dralab.dev 2, nic.dralab.dev 1) gpu.dralab.dev 7 gpu.dralab.dev 2" {
		t.Errorf("node line = %q\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "DynamicResources plugin evaluations: Filter 10, PreFilter 5 (timed 1, mean 2.0ms)") {
		t.Errorf("no scheduler line:\n%s", out.String())
	}
}
