package kit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
)

// healthStream opens the kubelet's device health stream to the driver.
func (h *harness) healthStream(ctx context.Context) drahealthv1.DRAResourceHealth_NodeWatchResourcesClient {
	h.t.Helper()
	c := drahealthv1.NewDRAResourceHealthClient(h.dial(h.opts.PluginDir + "/" + h.draSocket()))
	s, err := c.NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// healthOf is a report as "device=health[: message]" in device order.
func healthOf(r *drahealthv1.NodeWatchResourcesResponse) string {
	var out []string
	for _, d := range r.Devices {
		s := d.Device.DeviceName + "=" + d.Health.String()
		if d.Message != "" {
			s += ": " + d.Message
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// sliceTaints are the devices' taints in the published slices, as
// "device:key=value:effect".
func (h *harness) sliceTaints() string {
	list, err := h.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			for _, tn := range d.Taints {
				out = append(out, fmt.Sprintf("%s:%s=%s:%s", d.Name, tn.Key, tn.Value, tn.Effect))
				if tn.TimeAdded == nil {
					out = append(out, d.Name+": no TimeAdded")
				}
			}
		}
	}
	return strings.Join(out, ",")
}

func (h *harness) waitTaints(want string) {
	h.t.Helper()
	got := ""
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = h.sliceTaints(); got == want {
			return
		}
	}
	h.t.Fatalf("published taints %q, want %q", got, want)
}

// The kubelet's health stream reports every device, healthy until the
// driver's monitor says otherwise; a fault is reported at once with its
// message and puts its taint on the device in the published slice; healing
// takes both back.
func TestDeviceHealth(t *testing.T) {
	h := newHarness(t, 3, func(o *Options) { o.ReportHealth = true })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := h.healthStream(ctx)
	recv := func() string {
		t.Helper()
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return healthOf(r)
	}
	if got, want := recv(), "gpu-0=HEALTHY, gpu-1=HEALTHY, gpu-2=HEALTHY"; got != want {
		t.Fatalf("first report %q, want %q", got, want)
	}
	fault := DeviceFault{Message: "XID 79: GPU has fallen off the bus", Taint: &resourceapi.DeviceTaint{Key: "gpu.test.dev/xid", Value: "79", Effect: resourceapi.DeviceTaintEffectNoExecute}}
	if err := h.driver.SetDeviceHealth(ctx, map[string]DeviceFault{"gpu-1": fault}); err != nil {
		t.Fatal(err)
	}
	if got, want := recv(), "gpu-0=HEALTHY, gpu-1=UNHEALTHY: XID 79: GPU has fallen off the bus, gpu-2=HEALTHY"; got != want {
		t.Errorf("report after the fault %q, want %q", got, want)
	}
	h.waitTaints("gpu-1:gpu.test.dev/xid=79:NoExecute")
	// The same faults again change nothing: no report, the taint's time stays.
	before := h.driver.DeviceFaults()["gpu-1"].Taint.TimeAdded
	if err := h.driver.SetDeviceHealth(ctx, map[string]DeviceFault{"gpu-1": fault}); err != nil {
		t.Fatal(err)
	}
	if after := h.driver.DeviceFaults()["gpu-1"].Taint.TimeAdded; !after.Equal(before) {
		t.Errorf("the taint's TimeAdded moved from %v to %v", before, after)
	}
	if err := h.driver.SetDeviceHealth(ctx, map[string]DeviceFault{"gpu-7": fault}); err == nil || !strings.Contains(err.Error(), `"gpu-7" is not a device of this node`) {
		t.Errorf("a fault of an unknown device: %v", err)
	}
	if err := h.driver.SetDeviceHealth(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := recv(), "gpu-0=HEALTHY, gpu-1=HEALTHY, gpu-2=HEALTHY"; got != want {
		t.Errorf("report after healing %q, want %q", got, want)
	}
	h.waitTaints("")
}

// A driver started without ReportHealth declines the stream: the kubelet
// then stops watching.
func TestNoHealthReporting(t *testing.T) {
	h := newHarness(t, 1)
	stream := h.healthStream(context.Background())
	_, err := stream.Recv()
	if errors.Is(err, io.EOF) || status.Code(err) != codes.Unimplemented {
		t.Errorf("health stream of a driver without ReportHealth: %v, want Unimplemented", err)
	}
}

// A prepared claim's status lists its devices as the driver prepared them,
// Ready with their data; unprepare takes the entries back.
func TestClaimDeviceStatus(t *testing.T) {
	inv := testDevices(2)
	for i := range inv {
		inv[i].StatusData = map[string]string{"uuid": "uuid-" + inv[i].API.Name}
	}
	h := newHarness(t, 0, func(o *Options) { o.Inventory = inv })
	c := h.claim("c", "gpu-1")
	if res := h.prepare(c)[string(c.UID)]; res.Error != "" {
		t.Fatal(res.Error)
	}
	got, err := h.client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.Status.Devices); n != 1 {
		t.Fatalf("status.devices %+v, want one entry", got.Status.Devices)
	}
	ds := got.Status.Devices[0]
	if ds.Driver != testDriver || ds.Pool != testNode || ds.Device != "gpu-1" || len(ds.Conditions) != 1 ||
		ds.Conditions[0].Type != ConditionReady || ds.Conditions[0].Status != metav1.ConditionTrue ||
		ds.Data == nil || string(ds.Data.Raw) != `{"uuid":"uuid-gpu-1"}` {
		t.Errorf("status.devices[0] = %+v (data %s)", ds, ds.Data)
	}
	if res := h.unprepare(c)[string(c.UID)]; res.Error != "" {
		t.Fatal(res.Error)
	}
	got, err = h.client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Devices) != 0 {
		t.Errorf("status.devices after unprepare: %+v", got.Status.Devices)
	}
	if got.Status.Allocation == nil {
		t.Error("unprepare removed the claim's allocation")
	}
}

// A network device's prepared claim carries its network data in the
// device's status entry; a device without any carries none.
func TestClaimNetworkData(t *testing.T) {
	inv := testDevices(2)
	inv[0].NetworkData = &resourceapi.NetworkDeviceData{InterfaceName: "net0", IPs: []string{"10.88.0.2/24"}, HardwareAddress: "02:00:00:00:00:01"}
	h := newHarness(t, 0, func(o *Options) { o.Inventory = inv })
	c := h.claim("c", "gpu-0", "gpu-1")
	if res := h.prepare(c)[string(c.UID)]; res.Error != "" {
		t.Fatal(res.Error)
	}
	got, err := h.client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byDevice := map[string]*resourceapi.NetworkDeviceData{}
	for _, ds := range got.Status.Devices {
		byDevice[ds.Device] = ds.NetworkData
	}
	if len(byDevice) != 2 {
		t.Fatalf("status.devices %+v, want two entries", got.Status.Devices)
	}
	if nd := byDevice["gpu-0"]; nd == nil || nd.InterfaceName != "net0" || !slices.Equal(nd.IPs, []string{"10.88.0.2/24"}) || nd.HardwareAddress != "02:00:00:00:00:01" {
		t.Errorf("gpu-0's network data = %+v, want net0 10.88.0.2/24 02:00:00:00:00:01", nd)
	}
	if nd := byDevice["gpu-1"]; nd != nil {
		t.Errorf("gpu-1 has no network, but its status says %+v", nd)
	}
}
