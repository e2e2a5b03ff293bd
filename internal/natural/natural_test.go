package natural

import (
	"slices"
	"testing"
)

func TestLess(t *testing.T) {
	names := []string{"worker-10", "worker-2", "gpu-1", "worker-1", "gpu", "worker-x", "worker-0"}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case Less(a, b):
			return -1
		case Less(b, a):
			return 1
		}
		return 0
	})
	want := []string{"gpu", "gpu-1", "worker-0", "worker-1", "worker-2", "worker-10", "worker-x"}
	if !slices.Equal(names, want) {
		t.Errorf("sorted = %v, want %v", names, want)
	}
}
