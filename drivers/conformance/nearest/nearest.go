// Package nearest finds the known name a misspelt one most likely meant,
// for "did you mean" in errors: a driver manifest's capabilities, a lab
// configuration's feature gates.
package nearest

import "strings"

// Name returns the known name closest to name, ignoring case, or "" when
// none is close enough to be a likely typo. Of equally close names it
// returns the first in known.
func Name(name string, known []string) string {
	best, bestDist := "", -1
	for _, k := range known {
		d := editDistance(strings.ToLower(name), strings.ToLower(k))
		if bestDist < 0 || d < bestDist {
			best, bestDist = k, d
		}
	}
	// A third of the name may be wrong: "DRAPriorityList" still suggests
	// DRAPrioritizedList, "GPU" suggests nothing.
	if bestDist > max(2, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
