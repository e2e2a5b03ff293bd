package scenarios

import (
	"errors"
	"strings"
	"testing"
)

// A scenario that needs fabric-attached GPUs is unmet, with the reason,
// on a cluster whose GPUs of the tier are all in their nodes.
func TestAttachedTiersAreRequired(t *testing.T) {
	req := Requirements{Tiers: []string{"h100"}, AttachedTiers: []string{"h100"}}
	inv := Inventory{Devices: map[string]int{"h100": 2}, Attached: map[string]int{}}
	err := inv.meets(req)
	if !errors.Is(err, ErrUnmet) || !strings.Contains(err.Error(), "h100 GPUs attached through a fabric, with binding conditions (attach: fabric)") {
		t.Errorf("meets = %v, want unmet for want of fabric-attached H100s", err)
	}
	inv.Attached["h100"] = 1
	if err := inv.meets(req); err != nil {
		t.Errorf("with a fabric-attached H100: %v", err)
	}
}
