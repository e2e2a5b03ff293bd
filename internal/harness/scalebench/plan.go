package scalebench

import (
	"fmt"
	"slices"

	"github.com/dralab/dralab/drivers/gpu"
)

// planned is one run of a case in a state at a size.
type planned struct {
	workload, state string
	nodes           int
}

// plan checks o and lists its runs in order, with o's defaults. Cases
// named by the caller must fit every size; of the default set, a case
// that does not fit a size is left out there, told to o.LeftOut.
func plan(o Options) (Options, []planned, error) {
	chosen := len(o.Cases) > 0
	o = o.withDefaults()
	for _, c := range o.Cases {
		if _, err := workloadOf(c); err != nil {
			return o, nil, err
		}
	}
	for _, s := range o.States {
		if s != StateEmpty && s != StateHalf {
			return o, nil, fmt.Errorf("unknown state %q; states: %v", s, States())
		}
	}
	for _, n := range o.Nodes {
		if n < 3 {
			return o, nil, fmt.Errorf("%d nodes: the bench needs at least 3, one per GPU tier", n)
		}
		for _, c := range o.Cases {
			if why := fits(c, n); why != "" && chosen {
				return o, nil, fmt.Errorf("%d nodes: case %s %s", n, c, why)
			}
		}
	}
	var runs []planned
	for _, n := range o.Nodes {
		for _, s := range o.States {
			for _, c := range o.Cases {
				if why := fits(c, n); why != "" {
					if o.LeftOut != nil {
						o.LeftOut(Name(c, s, n), why)
					}
					continue
				}
				runs = append(runs, planned{c, s, n})
			}
		}
	}
	if len(runs) == 0 {
		return o, nil, fmt.Errorf("no case fits the sizes %v", o.Nodes)
	}
	return o, runs, nil
}

// fits says why case c cannot run on n nodes, "" when it can.
func fits(c string, n int) string {
	if n < GangMinNodes && slices.Contains(WholeNodeCases(), c) {
		return fmt.Sprintf("needs at least %d, two NVLink domains of %d servers", GangMinNodes, GroupSize)
	}
	return ""
}

// shape is the size of one run.
type shape struct {
	nodes, devicesPerNode int
	// prefillPerNode pods pinned to each of the first prefillNodes nodes
	// fill them before the run; warmup pods of the case's own come first
	// when none do.
	prefillPerNode, prefillNodes, warmup int
	// measured is the number of measured pods.
	measured int
}

func shapeOf(workloadName, state string, nodes int) shape {
	s := shape{nodes: nodes, devicesPerNode: GPUsPerNode}
	w, _ := workloadOf(workloadName)
	if w.wholeNode {
		return wholeNodeShape(s, state)
	}
	s.prefillNodes = nodes
	if state == StateHalf {
		s.prefillPerNode = GPUsPerNode / 2
	} else {
		s.warmup = max(10, nodes/10)
	}
	// The measured pods take half of the GPUs of an empty cluster and a
	// quarter of a half-full one: they fit in every case (the selector's
	// ≥ 40Gi GPUs are two thirds of all, each tier a third).
	gpus := nodes * GPUsPerNode / 2
	if state == StateHalf {
		gpus /= 2
	}
	s.measured = gpus / w.gpusPerPod
	return s
}

// wholeNodeShape is the shape of the cases whose pods take whole servers.
// The virtual nodes form NVLink domains of GroupSize servers in turn
// (domainOf). The half state fills the first half of the servers whole;
// the empty state warms up with one group's worth of pods. The measured
// pods are one group for each domain still wholly free: every gang fits,
// with its topology constraint too, and the single pods of whole-node are
// as many.
func wholeNodeShape(s shape, state string) shape {
	domains := s.nodes / GroupSize
	free := domains - 1
	if state == StateHalf {
		s.prefillNodes = s.nodes / 2
		s.prefillPerNode = GPUsPerNode
		free = domains - (s.prefillNodes+GroupSize-1)/GroupSize
	} else {
		s.warmup = GroupSize
	}
	s.measured = max(free, 0) * GroupSize
	return s
}

// domainOf is the NVLink domain (and rack) of the i-th virtual node.
func domainOf(i int) gpu.Topology {
	return gpu.Topology{Rack: fmt.Sprintf("rack-%03d", i/GroupSize), NVLinkDomain: fmt.Sprintf("nvl-%03d", i/GroupSize)}
}
