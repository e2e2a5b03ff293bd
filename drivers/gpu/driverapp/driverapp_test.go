package driverapp

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// --partitioning and --sharing reach the fake inventory: --list shows the
// MIG devices, and a mode the GPUs cannot have is an error naming the flag.
func TestPartitioningAndSharingFlags(t *testing.T) {
	var out bytes.Buffer
	o := Options{Inventory: InventoryFake, Mode: ModeDRA, NodeName: "n", Profile: "h100-80gb", GPUs: 1, Partitioning: "mig"}
	if err := List(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "  name: gpu-0-mig-"); got != 18 {
		t.Errorf("--list of a partitioned H100 shows %d MIG devices, want 18:\n%s", got, out.String())
	}
	for _, c := range []struct {
		mutate func(*Options)
		want   string
	}{
		{func(o *Options) { o.Profile = "l4-24gb" }, `--partitioning "mig": GPU profile l4-24gb has no MIG geometry`},
		{func(o *Options) { o.Sharing = "memory" }, `--sharing "memory": a GPU is partitioned or shared, not both`},
		{func(o *Options) { o.Mode = ModeDevicePlugin }, "--partitioning, --sharing and --attach need --mode dra"},
		{func(o *Options) { o.Partitioning, o.Sharing = "", "mps" }, `--sharing "mps": want memory`},
	} {
		bad := o
		c.mutate(&bad)
		if err := List(context.Background(), bad, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", bad, err, c.want)
		}
	}
}
