package scenarios

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// myScenario is a workshop author's scenario: one pod that asks for an L4.
const myScenario = `apiVersion: scenarios.dralab.dev/v1alpha1
kind: Scenario
name: my-l4
title: "One pod, one L4"
summary: A pod's claim asks for an L4 by its product name.
labels: {tier: fast}
requires:
  tiers: [l4]
steps:
- name: the pod
  apply: [pod.yaml]
  expect:
  - pods: inference
    phase: Running
    tier: l4
`

// writeFolder writes files (path → content) under a new temporary folder.
func writeFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadDir(t *testing.T) {
	dir := writeFolder(t, map[string]string{
		"my-l4/scenario.yaml": myScenario,
		"my-l4/pod.yaml":      "apiVersion: v1\nkind: Pod\nmetadata: {name: inference}\n",
		"notes/README.md":     "a folder without scenario.yaml is not a scenario",
	})
	all, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Name != "my-l4" || all[0].Steps[0].Expect[0].Tier != "l4" {
		t.Fatalf("LoadDir = %+v, want the one scenario my-l4", all)
	}
	s := all[0]
	if got, want := s.Source("pod.yaml"), filepath.Join(dir, "my-l4", "pod.yaml"); got != want {
		t.Errorf("Source = %s, want %s", got, want)
	}
	data, err := s.File("pod.yaml")
	if err != nil || !strings.Contains(string(data), "inference") {
		t.Errorf("File(pod.yaml) = %q, %v", data, err)
	}
	if _, err := s.File("missing.yaml"); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "my-l4", "missing.yaml")) {
		t.Errorf("File(missing.yaml) = %v, want an error naming its path", err)
	}
}

func TestLoadDirErrorsNameTheFile(t *testing.T) {
	cases := map[string]struct {
		files map[string]string
		want  []string
	}{
		"unknown field": {
			files: map[string]string{"my-l4/scenario.yaml": strings.Replace(myScenario, "labels:", "lables:", 1), "my-l4/pod.yaml": ""},
			want:  []string{filepath.Join("my-l4", "scenario.yaml"), `unknown field "lables"`},
		},
		"a file the folder lacks": {
			files: map[string]string{"my-l4/scenario.yaml": myScenario},
			want:  []string{filepath.Join("my-l4", "scenario.yaml"), "pod.yaml"},
		},
		"name is not the folder's": {
			files: map[string]string{"other/scenario.yaml": myScenario, "other/pod.yaml": ""},
			want:  []string{filepath.Join("other", "scenario.yaml"), `"my-l4" must be the folder's name "other"`},
		},
		"no scenario": {
			files: map[string]string{"README.md": "nothing here"},
			want:  []string{"holds no scenario", "scenario.yaml"},
		},
		"a node resource that is not one": {
			files: map[string]string{"my-l4/scenario.yaml": strings.Replace(myScenario, "tier: l4\n", "tier: l4\n    nodeAllocatable: {gpus: \"1\"}\n", 1), "my-l4/pod.yaml": ""},
			want:  []string{filepath.Join("my-l4", "scenario.yaml"), "nodeAllocatable[gpus]", `"memory"`},
		},
		"a node resource that is no quantity": {
			files: map[string]string{"my-l4/scenario.yaml": strings.Replace(myScenario, "tier: l4\n", "tier: l4\n    nodeAllocatable: {memory: lots}\n", 1), "my-l4/pod.yaml": ""},
			want:  []string{filepath.Join("my-l4", "scenario.yaml"), "nodeAllocatable[memory]", "lots"},
		},
		"one scenario's own folder": {
			files: map[string]string{"scenario.yaml": myScenario, "pod.yaml": ""},
			want:  []string{"is one scenario's folder", "name the folder that holds it"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := writeFolder(t, c.files)
			_, err := LoadDir(dir)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("LoadDir = %v, want ErrInvalid", err)
			}
			for _, w := range append(c.want, dir) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if _, err := LoadDir(filepath.Join(t.TempDir(), "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("LoadDir(absent) = %v, want an error naming it", err)
	}
	file := filepath.Join(writeFolder(t, map[string]string{"f": "x"}), "f")
	if _, err := LoadDir(file); err == nil || !strings.Contains(err.Error(), "is a file") {
		t.Errorf("LoadDir(file) = %v", err)
	}
}

func TestLoadFS(t *testing.T) {
	fsys := fstest.MapFS{
		"my-l4/scenario.yaml": {Data: []byte(myScenario)},
		"my-l4/pod.yaml":      {Data: []byte("kind: Pod")},
	}
	all, err := Load(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Source("pod.yaml") != "my-l4/pod.yaml" {
		t.Fatalf("Load = %+v", all)
	}
	if _, err := Find(all, "claims"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "my-l4") {
		t.Errorf("Find(claims) = %v, want ErrNotFound listing my-l4", err)
	}
}

func TestSelected(t *testing.T) {
	t.Setenv(EnvDir, "")
	all, from, err := Selected()
	if err != nil || from != "built-in" || len(all) < 10 {
		t.Fatalf("Selected() without %s = %d scenarios from %q, %v", EnvDir, len(all), from, err)
	}
	dir := writeFolder(t, map[string]string{"my-l4/scenario.yaml": myScenario, "my-l4/pod.yaml": ""})
	t.Setenv(EnvDir, dir)
	all, from, err = Selected()
	if err != nil || from != dir || len(all) != 1 || all[0].Name != "my-l4" {
		t.Fatalf("Selected() with %s=%s = %v from %q, %v", EnvDir, dir, Names(all), from, err)
	}
	t.Setenv(EnvDir, filepath.Join(dir, "my-l4"))
	if _, _, err := Selected(); err == nil || !strings.Contains(err.Error(), EnvDir+"=") {
		t.Errorf("Selected() of one scenario's folder = %v, want an error naming %s", err, EnvDir)
	}
}

// Every manifest a step names is decoded when the scenario is loaded: a
// file that does not decode, or a DeviceTaintRule without a selector
// (which taints nothing), is an error naming the file and the object
// before anything is applied; a rule with an empty selector is fine.
func TestLoadChecksTheManifests(t *testing.T) {
	const rule = "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata: {name: drain}\nspec:\n%s  taint: {key: example.com/drain, effect: NoSchedule}\n"
	for name, c := range map[string]struct {
		pod  string
		want []string
	}{
		"no selector": {
			pod:  "apiVersion: v1\nkind: Pod\nmetadata: {name: inference}\n---\n" + fmt.Sprintf(rule, ""),
			want: []string{filepath.Join("my-l4", "pod.yaml"), "object 1 (DeviceTaintRule drain)", "spec.deviceSelector is absent", "deviceSelector: {}"},
		},
		"not YAML": {
			pod:  "kind: Pod\nmetadata: {name: [inference\n",
			want: []string{filepath.Join("my-l4", "pod.yaml")},
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := writeFolder(t, map[string]string{"my-l4/scenario.yaml": myScenario, "my-l4/pod.yaml": c.pod})
			_, err := LoadDir(dir)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("LoadDir = %v, want ErrInvalid", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	dir := writeFolder(t, map[string]string{"my-l4/scenario.yaml": myScenario, "my-l4/pod.yaml": fmt.Sprintf(rule, "  deviceSelector: {}\n")})
	if _, err := LoadDir(dir); err != nil {
		t.Errorf("a rule with an empty selector: %v", err)
	}
}

func TestManifestsAreEachNamedOnce(t *testing.T) {
	s := &Scenario{Steps: []Step{
		{Apply: []string{"class.yaml", "claim.yaml"}},
		{CreatePods: &CreatePods{Manifests: []string{"a.yaml", "b.yaml"}, Group: "group.yaml"}},
		{Apply: []string{"claim.yaml"}},
		{CreatePods: &CreatePods{Manifest: "a.yaml"}},
	}}
	if got, want := s.Manifests(), []string{"class.yaml", "claim.yaml", "a.yaml", "b.yaml", "group.yaml"}; !slices.Equal(got, want) {
		t.Errorf("Manifests = %v, want %v", got, want)
	}
}
