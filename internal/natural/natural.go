// Package natural orders names the way people number things: gpu-2 before
// gpu-10, worker-9 before worker-10.
package natural

import (
	"strconv"
	"strings"
)

// Less orders names by their prefix, then by the number after the last
// dash; names without one order by themselves.
func Less(a, b string) bool {
	pa, na := split(a)
	pb, nb := split(b)
	if pa != pb {
		return pa < pb
	}
	return na < nb
}

// Compare is Less as a three-way comparison for slices.SortFunc; names
// equal in order (gpu-2, gpu-02) compare as strings.
func Compare(a, b string) int {
	switch {
	case Less(a, b):
		return -1
	case Less(b, a):
		return 1
	}
	return strings.Compare(a, b)
}

// split cuts "gpu-10" into "gpu" and 10; a name without a numeric suffix
// is its own prefix, with -1.
func split(name string) (string, int) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name, -1
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return name, -1
	}
	return name[:i], n
}
