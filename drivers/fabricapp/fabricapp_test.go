package fabricapp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dralab/dralab/drivers/fabric"
)

// The plugin prepares what its Node's labels reach of the pools in its
// file; without the file, with a bad one, or without its Node it says
// which.
func TestInventoryReadsTheNodesLabels(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pools.json")
	pools := []fabric.Pool{
		{Name: "rack-a", Model: "h100-80gb", Memory: resource.MustParse("80Gi"), Count: 2, NodeSelector: map[string]string{"rack": "a"}},
		{Name: "rack-b", Model: "h100-80gb", Memory: resource.MustParse("80Gi"), Count: 1, NodeSelector: map[string]string{"rack": "b"}},
	}
	data, err := json.Marshal(pools)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b1", Labels: map[string]string{"rack": "b"}}})
	ctx := context.Background()
	o := Options{PoolsFile: file}
	o.NodeName = "b1"
	inv, err := inventory(ctx, o, client)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := inv.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.Pool+"/"+d.API.Name)
	}
	if want := []string{"rack-b/rack-b-gpu-0"}; !slices.Equal(names, want) {
		t.Errorf("node b1 prepares %v, want %v", names, want)
	}

	o.NodeName = "c1"
	if _, err := inventory(ctx, o, client); err == nil || !strings.Contains(err.Error(), "reading node c1") {
		t.Errorf("without its Node: %v", err)
	}
	if _, err := inventory(ctx, Options{}, client); err == nil || !strings.Contains(err.Error(), "--pools") {
		t.Errorf("without --pools: %v", err)
	}
	if err := os.WriteFile(file, []byte(`[{"name": "rack-a", "model": "h100-80gb", "count": 1}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	o.NodeName = "b1"
	if _, err := inventory(ctx, o, client); err == nil || !strings.Contains(err.Error(), "exactly one of nodeSelector, allNodes and perDevice") {
		t.Errorf("a pool reached no way: %v", err)
	}
}
