package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/dralab/dralab/drivers/conformance/allocation"
)

// Tables stay readable on large clusters: -o wide (or json, yaml) lists
// everything.
const (
	maxCandidates = 40
	maxNodes      = 12
)

func writeExplanation(w io.Writer, e *Explanation, wide bool) {
	if c := e.Claim; c != nil {
		fmt.Fprintf(w, "Claim %s/%s: %s", c.Namespace, c.Name, c.State)
		if len(c.Nodes) > 0 {
			fmt.Fprintf(w, " on %s", strings.Join(c.Nodes, ", "))
		}
		if len(c.ReservedFor) > 0 {
			fmt.Fprintf(w, ", reserved for %s", strings.Join(c.ReservedFor, ", "))
		}
		fmt.Fprintln(w)
		for _, res := range c.Results {
			fmt.Fprintf(w, "  %s → %s\n", chosen(res.Request, res.Subrequest), res.Device)
		}
	}
	if e.Message != "" {
		fmt.Fprintln(w, e.Message)
	}
	for _, p := range e.Pods {
		writePod(w, p, wide)
	}
}

func writePod(w io.Writer, p PodExplanation, wide bool) {
	if p.Node != "" {
		fmt.Fprintf(w, "Pod %s/%s: %s on node %s\n", p.Namespace, p.Name, p.Phase, p.Node)
	} else {
		fmt.Fprintf(w, "Pod %s/%s: %s, not scheduled\n", p.Namespace, p.Name, p.Phase)
	}
	for _, d := range p.Allocated {
		fmt.Fprintf(w, "  claim %s: %s → %s\n", d.Claim, chosen(d.Request, d.Subrequest), d.Device)
	}
	if p.Reason != "" {
		why := p.Reason
		if p.ReasonCode != "" {
			why = p.ReasonCode + ": " + why
		}
		fmt.Fprintf(w, "  Why: %s\n", why)
	}
	if v := p.Verdict; v != nil {
		writeVerdict(w, v, wide)
	}
	if len(p.Candidates) == 0 {
		return
	}
	fmt.Fprintln(w, "  Candidates, in the order the allocator tries them:")
	header := "  REQUEST\tNODE\tDEVICE\tSTATE\tHELD BY"
	if wide {
		header += "\tDETAIL"
	}
	fmt.Fprintln(w, header)
	shown := p.Candidates
	if !wide && len(shown) > maxCandidates {
		shown = shown[:maxCandidates]
	}
	for _, c := range shown {
		line := fmt.Sprintf("  %s\t%s\t%s\t%s\t%s", chosen(c.Request, c.Subrequest), dash(c.Node), c.Device, c.State, holders(c.Holders, p.Namespace))
		if wide {
			line += "\t" + dash(c.Detail)
		}
		fmt.Fprintln(w, line)
	}
	if len(shown) < len(p.Candidates) {
		fmt.Fprintf(w, "  … %d more (-o wide lists every one)\n", len(p.Candidates)-len(shown))
	}
	fmt.Fprintln(w, "  Free on one node (a claim's devices come from one node):")
	for _, alt := range alternativesOf(p.Candidates) {
		need := 0
		for _, c := range p.Candidates {
			if c.Alternative() == alt {
				need = c.Count
				break
			}
		}
		_, request, _ := strings.Cut(alt, "/")
		request = strings.TrimSuffix(request, "/")
		fmt.Fprintf(w, "  %s needs %d: %s\n", request, need, perNode(p.FreePerNode[alt], wide))
	}
}

// alternativesOf are the candidates' alternatives (claim/request/sub), in
// the order tried.
func alternativesOf(cands []allocation.Candidate) []string {
	var out []string
	for _, c := range cands {
		if alt := c.Alternative(); !slices.Contains(out, alt) {
			out = append(out, alt)
		}
	}
	return out
}

// perNode says how many devices are free on each node, most first: "at
// most 1 on any node (n1 1, n2 1)".
func perNode(free map[string]int, wide bool) string {
	nodes := slices.SortedFunc(maps.Keys(free), func(a, b string) int {
		return cmp.Or(free[b]-free[a], strings.Compare(a, b))
	})
	if len(nodes) == 0 {
		return "no node has one"
	}
	most := free[nodes[0]]
	var words []string
	for i, n := range nodes {
		if !wide && i == maxNodes {
			words = append(words, fmt.Sprintf("%d more nodes", len(nodes)-i))
			break
		}
		words = append(words, fmt.Sprintf("%s %d", cmp.Or(n, "(any node)"), free[n]))
	}
	return fmt.Sprintf("at most %d free on any node (%s)", most, strings.Join(words, ", "))
}

func writeDevices(w io.Writer, rows []allocation.DeviceRow, wide bool) {
	header := "NODE\tPOOL\tDEVICE\tPRODUCT\tSTATE\tCHOSEN\tHELD BY"
	if wide {
		header = "NODE\tDRIVER\tPOOL\tDEVICE\tPRODUCT\tSTATE\tCHOSEN\tHELD BY\tTAINTS"
	}
	fmt.Fprintln(w, header)
	free, all := map[string]int{}, map[string]int{}
	for _, d := range rows {
		var chose []string
		for _, h := range d.Holders {
			chose = append(chose, chosen(h.Request, h.Subrequest))
		}
		cells := []string{dash(d.Node), d.Pool, d.Device, dash(d.Product), d.State, dash(strings.Join(chose, ", ")), holders(d.Holders, "")}
		if wide {
			cells = slices.Insert(cells, 1, d.Driver)
			cells = append(cells, dash(strings.Join(d.Taints, ", ")))
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
		all[d.Node]++
		if d.State == allocation.StateFree {
			free[d.Node]++
		}
	}
	var words []string
	for i, n := range slices.Sorted(maps.Keys(all)) {
		if !wide && i == maxNodes {
			words = append(words, fmt.Sprintf("%d more nodes", len(all)-i))
			break
		}
		words = append(words, fmt.Sprintf("%s %d of %d", cmp.Or(n, "(any node)"), free[n], all[n]))
	}
	if len(words) > 0 {
		fmt.Fprintf(w, "Free per node: %s\n", strings.Join(words, ", "))
	}
}

func writeClaims(w io.Writer, rows []allocation.ClaimRow, wide bool) {
	header := "NAMESPACE\tNAME\tSTATE\tNODE\tALLOCATED\tRESERVED FOR"
	if wide {
		header += "\tCONDITIONS"
	}
	fmt.Fprintln(w, header)
	for _, c := range rows {
		var allocated, conditions []string
		for _, r := range c.Results {
			allocated = append(allocated, chosen(r.Request, r.Subrequest)+"="+r.Device)
			for _, cond := range r.Conditions {
				conditions = append(conditions, r.Device+" "+cond)
			}
		}
		line := strings.Join([]string{c.Namespace, c.Name, c.State, dash(strings.Join(c.Nodes, ",")), dash(strings.Join(allocated, ", ")), dash(strings.Join(c.ReservedFor, ", "))}, "\t")
		if wide {
			line += "\t" + dash(strings.Join(conditions, ", "))
		}
		fmt.Fprintln(w, line)
	}
}

// chosen is a request and the subrequest chosen for it: gpu/h100.
func chosen(request, subrequest string) string {
	if subrequest == "" {
		return request
	}
	return request + "/" + subrequest
}

// holders names the pods (and claims) holding a device, the namespace
// left out where it is ns.
func holders(hs []allocation.Holder, ns string) string {
	var out []string
	for _, h := range hs {
		claim := strings.TrimPrefix(h.Claim, ns+"/")
		var pods []string
		for _, p := range h.Pods {
			pods = append(pods, strings.TrimPrefix(p, ns+"/"))
		}
		s := "claim " + claim
		if len(pods) > 0 {
			s = "pod " + strings.Join(pods, ", ") + " (" + s + ")"
		}
		if h.AdminAccess {
			s += " [admin access]"
		}
		out = append(out, s)
	}
	return dash(strings.Join(out, "; "))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeVerdict says on how many nodes the allocator places the pod's
// claims, which, and what keeps the pod off those it may not use.
func writeVerdict(w io.Writer, v *allocation.Verdict, wide bool) {
	fits := v.Fits()
	line := fmt.Sprintf("  Allocator: the claims fit on %d of %d nodes", len(fits), len(v.Nodes))
	if len(fits) > 0 {
		shown := fits
		if !wide && len(shown) > maxNodes {
			shown = shown[:maxNodes]
		}
		line += " (" + strings.Join(shown, ", ")
		if len(shown) < len(fits) {
			line += fmt.Sprintf(", … %d more", len(fits)-len(shown))
		}
		line += ")"
	}
	if v.Err != "" {
		line += "; it fails for the pod: " + v.Err
	}
	fmt.Fprintln(w, line)
	shown := 0
	for _, n := range v.Nodes {
		if !n.Fits || len(n.Outside) == 0 {
			continue
		}
		if !wide && shown == maxNodes {
			fmt.Fprintln(w, "    … (-o wide lists every node)")
			break
		}
		var whats []string
		for _, b := range n.Outside {
			whats = append(whats, b.What)
		}
		fmt.Fprintf(w, "    %s: %s\n", n.Node, strings.Join(whats, "; "))
		shown++
	}
}
