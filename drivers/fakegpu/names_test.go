package fakegpu

import (
	"fmt"
	"testing"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/internal/slicetest"
)

// Every built-in profile, in every mode it allows, publishes a pool the
// API server accepts and Kubernetes 1.38's helper will too: the GPU
// driver's own attribute and capacity names unqualified.
func TestEveryProfilePublishesValidNames(t *testing.T) {
	for _, name := range BuiltinNames() {
		p := mustProfile(t, name)
		invs := []*Inventory{
			{Profile: p, Count: 8, Topology: gpu.Topology{Rack: "rack-1", NVLinkDomain: "nvl-1"}},
			{Profile: p, Count: 2, Sharing: SharingMemory},
			{Profile: p, Count: 2, Attach: AttachFabric},
			{Profile: p, Count: 2, HostMemoryOverhead: true},
		}
		if p.MIG != nil {
			invs = append(invs, &Inventory{Profile: p, Count: 2, Partitioning: PartitioningMIG, HostMemoryOverhead: true})
		}
		for i, inv := range invs {
			inv.Node = fmt.Sprintf("%s-%d", name, i)
			t.Run(inv.Node, func(t *testing.T) {
				_, pool := published(t, inv)
				slicetest.Validate(t, gpu.DriverName, inv.Node, pool)
			})
		}
	}
}
