package scenarios

import (
	"errors"
	"strings"
	"testing"
)

func TestEveryScenarioLoads(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"admin-access", "bandwidth-shares", "claim-status", "claims", "compatibility-groups", "counting", "cpu-mapping", "derived-alignment", "device-metadata", "device-taint", "extended-resource", "fabric-attach", "gang-fallback", "gang-partitions", "gang-shared-claim", "gang-vs-partial", "gpu-failure", "gpu-nic-pair", "gpu-sharing", "group-claim", "host-memory", "list-numa", "mig-fallback", "mig-partitions", "multi-gpu", "network-attach", "network-attached", "no-prepare", "prioritized-fallback", "shared-claim", "tainted-gpu-nodes", "topology"}
	var got []string
	for _, s := range all {
		got = append(got, s.Name)
		readme, err := s.File("README.md")
		if err != nil || !strings.Contains(string(readme), "```mermaid") {
			t.Errorf("%s: README.md needs a Mermaid diagram (%v)", s.Name, err)
		}
		if s.Labels["tier"] != "fast" && s.Labels["tier"] != "slow" {
			t.Errorf("%s: label tier is %q, want fast or slow", s.Name, s.Labels["tier"])
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("scenarios = %v, want %v", got, want)
	}
	if _, err := Get("no-such"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "claims") {
		t.Errorf("Get(unknown) = %v", err)
	}
}

func TestParseErrorsNameFileAndField(t *testing.T) {
	const head = "apiVersion: scenarios.dralab.dev/v1alpha1\nkind: Scenario\nname: x\ntitle: X\nsummary: s\n"
	files := []string{"scenario.yaml", "pod.yaml"}
	cases := map[string]struct {
		yaml string
		want []string
	}{
		"unknown field":           {head + "steps: [{name: a, apply: [pod.yaml], expectt: []}]\n", []string{`unknown field "steps[0].expectt"`}},
		"unknown field deeper":    {head + "steps: [{name: a, apply: [pod.yaml], expect: [{pods: p, teir: h100}]}]\n", []string{`unknown field "steps[0].expect[0].teir"`}},
		"unknown count field":     {head + "steps: [{name: a, createPods: {manifest: pod.yaml, replicas: {devicesof: [h100]}}}]\n", []string{"devicesof"}},
		"unknown lab":             {head + "lab: frontear\nsteps: [{name: a, apply: [pod.yaml]}]\n", []string{"lab", `"frontear"`, `"frontier"`}},
		"unknown tier":            {head + "steps: [{name: a, apply: [pod.yaml], expect: [{pods: p, tier: h200}]}]\n", []string{"steps[0].expect[0].tier", `"h200"`}},
		"missing file":            {head + "steps: [{name: a, apply: [nope.yaml]}]\n", []string{"steps[0].apply[0]", "nope.yaml"}},
		"two actions":             {head + "steps: [{name: a, apply: [pod.yaml], deletePods: {pods: p, count: 1}}]\n", []string{"steps[0]", "at most one action"}},
		"reason without pending":  {head + "steps: [{name: a, apply: [pod.yaml], expect: [{pods: p, reason: AllAllocated}]}]\n", []string{"steps[0].expect[0].reason"}},
		"bad reason":              {head + "steps: [{name: a, apply: [pod.yaml], expect: [{pods: p, phase: Pending, reason: Busy}]}]\n", []string{`"Busy"`}},
		"bad pattern":             {head + "steps: [{name: a, apply: [pod.yaml], expect: [{pods: '[x'}]}]\n", []string{"steps[0].expect[0].pods"}},
		"no steps":                {head, []string{"steps: Required"}},
		"manifest and manifests":  {head + "steps: [{name: a, createPods: {manifest: pod.yaml, manifests: [pod.yaml], replicas: 1}}]\n", []string{"steps[0].createPods.manifests", "not both"}},
		"missing group file":      {head + "steps: [{name: a, createPods: {manifest: pod.yaml, group: group.yaml, replicas: 1}}]\n", []string{"steps[0].createPods.group", "group.yaml"}},
		"bad bound":               {head + "steps: [{name: a, expectGroups: [{groups: g, bound: half}]}]\n", []string{"steps[0].expectGroups[0].bound", `"half"`}},
		"group reason":            {head + "steps: [{name: a, expectGroups: [{groups: g, reason: Unschedulable}]}]\n", []string{"steps[0].expectGroups[0].reason", "scheduled: false"}},
		"nothing to check":        {head + "steps: [{name: a, expectGroups: [{groups: g}]}]\n", []string{"steps[0].expectGroups[0]", "something to check"}},
		"gone and bound":          {head + "steps: [{name: a, expectGroups: [{groups: g, gone: true, bound: all}]}]\n", []string{"steps[0].expectGroups[0].gone"}},
		"bad resource":            {head + "requires: {resources: [podgroups]}\nsteps: [{name: a, apply: [pod.yaml]}]\n", []string{"requires.resources[0]", "resource.group/version"}},
		"taint without an effect": {head + "requires: {nodeTaints: [nvidia.com/gpu=present]}\nsteps: [{name: a, apply: [pod.yaml]}]\n", []string{"requires.nodeTaints[0]", "key=value:Effect"}},
		"taint of a bad key":      {head + "requires: {nodeTaints: ['bad key:NoSchedule']}\nsteps: [{name: a, apply: [pod.yaml]}]\n", []string{"requires.nodeTaints[0]", `"bad key:NoSchedule"`}},
		"bad delete phase":        {head + "steps: [{name: a, deletePods: {pods: p, phase: Done}}]\n", []string{"steps[0].deletePods.phase", `"Done"`}},
		"malformed":               {head + "steps: [\n", []string{"yaml"}},
		"hold within backoff":     {head + "steps: [{name: a, apply: [pod.yaml], holdsFor: 5s, expect: [{pods: p, phase: Pending}]}]\n", []string{"steps[0].holdsFor", "maximum backoff"}},
		"hold not a duration":     {head + "steps: [{name: a, apply: [pod.yaml], holdsFor: long, expect: [{pods: p, phase: Pending}]}]\n", []string{"steps[0].holdsFor", "a duration"}},
		"hold nothing":            {head + "steps: [{name: a, apply: [pod.yaml], holdsFor: 15s}]\n", []string{"steps[0].expect", "holdsFor needs expectations"}},
		"pairs without class":     {head + "steps: [{name: a, createPods: {manifest: pod.yaml, replicas: {pairsOf: {tier: l4, attribute: resource.kubernetes.io/pcieRoot}}}}]\n", []string{"steps[0].createPods.replicas.pairsOf.class"}},
		"pairs bare attribute":    {head + "requires: {pairs: [{tier: l4, attribute: pcieRoot, class: rdma.nic.dralab.dev}]}\nsteps: [{name: a, apply: [pod.yaml]}]\n", []string{"requires.pairs[0].attribute", "qualified"}},
		"pairs unknown tier":      {head + "requires: {pairs: [{tier: t4, attribute: a.b/c, class: rdma.nic.dralab.dev}]}\nsteps: [{name: a, apply: [pod.yaml]}]\n", []string{"requires.pairs[0].tier", `"t4"`}},
		"nodes without value":     {head + "steps: [{name: a, createPods: {manifest: pod.yaml, replicas: {nodesOf: {class: rdma.nic.dralab.dev, attribute: resource.kubernetes.io/numaNode}}}}]\n", []string{"steps[0].createPods.replicas.nodesOf.value"}},
		"wrong version":           {strings.Replace(head, "v1alpha1", "v2", 1) + "steps: [{name: a, apply: [pod.yaml]}]\n", []string{"apiVersion"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("scenarios/x/scenario.yaml", []byte(c.yaml), files)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("not ErrInvalid: %v", err)
			}
			for _, w := range append(c.want, "scenarios/x/scenario.yaml") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
