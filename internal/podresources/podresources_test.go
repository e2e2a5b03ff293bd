package podresources

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"
)

// lister serves a fixed List answer over a real socket.
type lister struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	resp *podresourcesapi.ListPodResourcesResponse
}

func (l *lister) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return l.resp, nil
}

func serve(t *testing.T, resp *podresourcesapi.ListPodResourcesResponse) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(s, &lister{resp: resp})
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return socket
}

func TestListLaysOutEachDevice(t *testing.T) {
	resp := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Name: "train", Namespace: "ml", Containers: []*podresourcesapi.ContainerResources{
			{Name: "sidecar"},
			{Name: "app", DynamicResources: []*podresourcesapi.DynamicResource{{
				ClaimName: "pair", ClaimNamespace: "ml",
				ClaimResources: []*podresourcesapi.ClaimResource{
					{DriverName: "nic.dralab.dev", PoolName: "n1", DeviceName: "nic-0", ShareId: ptr.To("a1b2"), CdiDevices: []*podresourcesapi.CDIDevice{{Name: "nic.dralab.dev/nic=nic-0"}}},
					{DriverName: "gpu.dralab.dev", PoolName: "n1", DeviceName: "gpu-0", CdiDevices: []*podresourcesapi.CDIDevice{{Name: "dralab.dev/gpu=gpu-0"}, {Name: "dralab.dev/gpu=node"}}},
				},
			}}},
		}},
		{Name: "idle", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{Name: "c"}}},
	}}
	rows, err := List(context.Background(), serve(t, resp))
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Namespace: "default", Pod: "idle", Container: "c"},
		{Namespace: "ml", Pod: "train", Container: "app", Claim: "ml/pair", Driver: "gpu.dralab.dev", Pool: "n1", Device: "gpu-0", CDI: []string{"dralab.dev/gpu=gpu-0", "dralab.dev/gpu=node"}},
		{Namespace: "ml", Pod: "train", Container: "app", Claim: "ml/pair", Driver: "nic.dralab.dev", Pool: "n1", Device: "nic-0", Share: "a1b2", CDI: []string{"nic.dralab.dev/nic=nic-0"}},
		{Namespace: "ml", Pod: "train", Container: "sidecar"},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows:\n got %+v\nwant %+v", rows, want)
	}
	var out bytes.Buffer
	if err := Write(&out, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "NAMESPACE") ||
		strings.Join(strings.Fields(lines[2]), " ") != "ml train app ml/pair gpu.dralab.dev n1 gpu-0 - dralab.dev/gpu=gpu-0,dralab.dev/gpu=node" ||
		strings.Join(strings.Fields(lines[4]), " ") != "ml train sidecar - - - - - -" {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestListNamesTheSocket(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "absent.sock")
	if _, err := List(context.Background(), socket); err == nil || !strings.Contains(err.Error(), socket) {
		t.Errorf("List(absent) = %v, want an error naming the socket", err)
	}
}
