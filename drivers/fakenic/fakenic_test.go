package fakenic

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/internal/slicetest"
	"github.com/dralab/dralab/drivers/kit"
)

func nics(t *testing.T, node, profile string, count int) []kit.Device {
	t.Helper()
	p, err := LookupProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := (&Inventory{Node: node, Profile: p, Count: count}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

// NIC i of a node sits under the PCIe root and on the NUMA node of the
// fake GPU driver's GPU i: what gpu-nic-pair's matchAttribute relies on.
func TestNICsLineUpWithGPUs(t *testing.T) {
	gp, err := fakegpu.LookupProfile("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := (&fakegpu.Inventory{Node: "n", Profile: gp, Count: 8}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]int{}
	for i, nic := range nics(t, "n", "cx7-400g", 8) {
		root := *nic.API.Attributes[deviceattribute.StandardDeviceAttributePCIeRoot].StringValue
		if g := *gpus[i].API.Attributes[deviceattribute.StandardDeviceAttributePCIeRoot].StringValue; g != root {
			t.Errorf("%s under %s, %s under %s: want one root", nic.API.Name, root, gpus[i].API.Name, g)
		}
		roots[root]++
		if nic.API.Attributes[deviceattribute.StandardDeviceAttributeNUMANode].IntValue == nil {
			t.Errorf("%s has no %s", nic.API.Name, deviceattribute.StandardDeviceAttributeNUMANode)
		}
	}
	if len(roots) != 4 {
		t.Errorf("8 NICs under %d roots (%v), want 4: two per PCIe switch", len(roots), roots)
	}
}

// Every NIC of a node has its own interface, bus, MAC and address; the
// next node's NIC i has another MAC and address on the same rail subnet.
func TestNICIdentities(t *testing.T) {
	a, b := nics(t, "node-a", "cx7-400g", 8), nics(t, "node-b", "cx7-400g", 8)
	seen := map[string]string{}
	for _, devs := range [][]kit.Device{a, b} {
		for _, d := range devs {
			nd := d.NetworkData
			if nd == nil || len(nd.IPs) != 1 {
				t.Fatalf("%s: network data %+v, want an interface and one address", d.API.Name, nd)
			}
			prefix, err := netip.ParsePrefix(nd.IPs[0])
			if err != nil || !prefix.Addr().Is4() {
				t.Errorf("%s: address %q is not an IPv4 CIDR: %v", d.API.Name, nd.IPs[0], err)
			}
			for _, id := range []string{nd.HardwareAddress, nd.IPs[0]} {
				if other, dup := seen[id]; dup {
					t.Errorf("%s and %s share %s", d.API.Name, other, id)
				}
				seen[id] = d.API.Name
			}
			if got := *d.API.Attributes[AttrInterface].StringValue; got != nd.InterfaceName || d.Env["INTERFACE"] != got {
				t.Errorf("%s: attribute interface %s, network data %s, container %s: want one name", d.API.Name, got, nd.InterfaceName, d.Env["INTERFACE"])
			}
		}
	}
	for i := range a {
		pa, _ := netip.ParsePrefix(a[i].NetworkData.IPs[0])
		pb, _ := netip.ParsePrefix(b[i].NetworkData.IPs[0])
		if pa.Masked() != pb.Masked() {
			t.Errorf("NIC %d of two nodes on %s and %s: want one rail subnet", i, pa.Masked(), pb.Masked())
		}
		if a[i].NetworkData.InterfaceName != b[i].NetworkData.InterfaceName {
			t.Errorf("NIC %d is %s on one node, %s on the other: one slot, one name", i, a[i].NetworkData.InterfaceName, b[i].NetworkData.InterfaceName)
		}
	}
}

// A NIC's bandwidth is consumable: a claim that does not say takes the
// whole link, one that does takes whole gigabits of it.
func TestBandwidthIsConsumable(t *testing.T) {
	for _, name := range ProfileNames() {
		p, _ := LookupProfile(name)
		d := nics(t, "n", name, 1)[0].API
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			t.Errorf("%s: NICs are not shareable", name)
		}
		bw := d.Capacity[CapacityBandwidth]
		link := resource.MustParse(fmt.Sprintf("%dG", p.LinkSpeedGbps))
		if bw.Value.Cmp(link) != 0 || bw.RequestPolicy == nil || bw.RequestPolicy.Default.Cmp(link) != 0 {
			t.Errorf("%s: bandwidth %s, default %v; want %s and the whole link by default", name, bw.Value.String(), bw.RequestPolicy, link.String())
		}
		if r := bw.RequestPolicy.ValidRange; r == nil || r.Step.Cmp(BandwidthStep) != 0 || r.Max.Cmp(link) != 0 {
			t.Errorf("%s: valid range %+v, want steps of %s up to the link", name, r, BandwidthStep.String())
		}
		if got := *d.Attributes[AttrLinkSpeed].IntValue; got != p.LinkSpeedGbps {
			t.Errorf("%s: link speed attribute %d, want %d", name, got, p.LinkSpeedGbps)
		}
	}
}

// The pool the driver publishes passes the API server's own validation,
// for every profile.
func TestSlicesAreValid(t *testing.T) {
	for _, name := range ProfileNames() {
		devs := nics(t, "node-a", name, 16)
		if p, _ := LookupProfile(name); p.SocketDirect {
			// And with numaNode as a list, as the lab publishes them.
			var err error
			if devs, err = (&Inventory{Node: "node-a", Profile: p, Count: 16, NUMAList: true}).Devices(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		api := make([]resourceapi.Device, 0, len(devs))
		for _, d := range devs {
			api = append(api, d.API)
		}
		pool, err := kit.Slices(api, nil)
		if err != nil {
			t.Fatal(err)
		}
		slicetest.Validate(t, DriverName, "node-a", pool)
	}
}

func TestUnknownProfileNamesTheChoices(t *testing.T) {
	_, err := LookupProfile("cx8-800g")
	if err == nil || !strings.Contains(err.Error(), `"cx8-800g"`) || !strings.Contains(err.Error(), "cx7-400g") {
		t.Errorf("LookupProfile(unknown) = %v, want an error naming it and the choices", err)
	}
	if _, err := (&Inventory{Node: "n", Profile: profiles["cx7-400g"]}).Devices(context.Background()); err == nil {
		t.Error("an inventory of no NICs was accepted")
	}
}

// With NUMAList, numaNode is a list: a NIC's own node and, for a Socket
// Direct adapter, the other socket's; without it, the own node, a number.
func TestNUMAList(t *testing.T) {
	numa := func(profile string, list bool, i int) string {
		p, err := LookupProfile(profile)
		if err != nil {
			t.Fatal(err)
		}
		devs, err := (&Inventory{Node: "n", Profile: p, Count: 8, NUMAList: list}).Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		a := devs[i].API.Attributes[deviceattribute.StandardDeviceAttributeNUMANode]
		if a.IntValue != nil {
			return fmt.Sprint(*a.IntValue)
		}
		return fmt.Sprint(a.IntValues)
	}
	for _, c := range []struct {
		profile string
		list    bool
		nic     int
		want    string
	}{
		{"cx7-sd-400g", true, 0, "[0 1]"},
		{"cx7-sd-400g", true, 4, "[1 0]"},
		{"cx7-sd-400g", false, 4, "1"},
		{"cx7-400g", true, 4, "[1]"},
		{"cx7-400g", false, 0, "0"},
	} {
		if got := numa(c.profile, c.list, c.nic); got != c.want {
			t.Errorf("%s, list %v, nic-%d: numaNode %s, want %s", c.profile, c.list, c.nic, got, c.want)
		}
	}
}
