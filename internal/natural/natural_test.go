package natural

import (
	"slices"
	"testing"
)

func TestLessAndCompare(t *testing.T) {
	names := []string{"worker-10", "worker-2", "gpu-1", "worker-1", "gpu", "worker-x", "worker-0"}
	slices.SortFunc(names, Compare)
	want := []string{"gpu", "gpu-1", "worker-0", "worker-1", "worker-2", "worker-10", "worker-x"}
	if !slices.Equal(names, want) {
		t.Errorf("sorted = %v, want %v", names, want)
	}
}
