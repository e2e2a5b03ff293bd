package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// WriteSummary writes what the soak did and found: faults injected by
// kind, what was churned, the invariant checks made and every violation
// with the objects involved; it ends with the verdict and, for a failed
// soak, why.
func WriteSummary(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Soak of lab %s: %s of churn and faults, settled in %.1f s (seed %d)\n", r.Lab, r.Duration.Round(time.Second), r.SettleSeconds, r.Seed)
	fmt.Fprintf(&b, "Kinds churned:     %s\n", strings.Join(r.Kinds, ", "))
	total := 0
	var faults []string
	for _, k := range FaultKinds {
		total += r.Faults[k]
		faults = append(faults, fmt.Sprintf("%s %d", k, r.Faults[k]))
	}
	fmt.Fprintf(&b, "Faults injected:   %d (%s); %d not injected when their turn came\n", total, strings.Join(faults, ", "), len(r.FaultErrors))
	for _, e := range r.FaultErrors {
		fmt.Fprintf(&b, "  not injected: %s\n", e)
	}
	groups := 0
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(r.Groups)) {
		groups += r.Groups[k]
		kinds = append(kinds, fmt.Sprintf("%s %d", k, r.Groups[k]))
	}
	fmt.Fprintf(&b, "Churned:           %d groups (%s); %d pods created, %d deleted; %d claims seen, %d deleted; %d API errors, %d failed reads\n",
		groups, strings.Join(kinds, ", "), r.PodsCreated, r.PodsDeleted, r.ClaimsSeen, r.ClaimsDeleted, r.APIErrors, r.ReadErrors)
	fmt.Fprintf(&b, "Scheduled→running: p50 %.0f s, p99 %.0f s, max %.0f s over %d pods (whole seconds)\n", r.Start.P50, r.Start.P99, r.Start.Max, r.Start.Count)
	var checks []string
	for _, k := range slices.Sorted(maps.Keys(r.Checks)) {
		checks = append(checks, fmt.Sprintf("%s %d", k, r.Checks[k]))
	}
	fmt.Fprintf(&b, "Invariant checks:  %d in %d rounds (%s)\n", r.TotalChecks(), r.Rounds, strings.Join(checks, ", "))
	fmt.Fprintf(&b, "Violations:        %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	// The last line is the verdict, and why when it failed.
	if r.Failure != "" {
		fmt.Fprintf(&b, "Result:            FAILED (seed %d; SOAK_SEED=%d repeats its choices): %s\n", r.Seed, r.Seed, strings.ReplaceAll(r.Failure, "\n", "; "))
	} else {
		fmt.Fprintf(&b, "Result:            passed\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as JSON.
func WriteJSON(path string, r *Report) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
