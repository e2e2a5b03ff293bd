package scenarios

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
)

// files holds every scenario folder.
//
//go:embed */scenario.yaml */*.yaml */README.md
var files embed.FS

// ErrNotFound means no scenario has the name asked for.
var ErrNotFound = errors.New("no such scenario")

// scenarioFile is the spec's file name in a scenario folder.
const scenarioFile = "scenario.yaml"

// All returns every scenario, sorted by name; a scenario file that does not
// decode is an error naming it.
func All() ([]*Scenario, error) {
	specs, err := fs.Glob(files, "*/"+scenarioFile)
	if err != nil {
		return nil, err
	}
	var out []*Scenario
	for _, p := range specs {
		s, err := load(path.Dir(p))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns one scenario.
func Get(name string) (*Scenario, error) {
	if _, err := fs.Stat(files, path.Join(name, scenarioFile)); err != nil {
		names, _ := Names()
		return nil, fmt.Errorf("%w %q; scenarios: %v", ErrNotFound, name, names)
	}
	return load(name)
}

// Names lists the scenarios' names.
func Names() ([]string, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
	}
	return names, nil
}

func load(dir string) (*Scenario, error) {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	source := path.Join("scenarios", dir, scenarioFile)
	data, err := files.ReadFile(path.Join(dir, scenarioFile))
	if err != nil {
		return nil, err
	}
	s, err := Parse(source, data, names)
	if err != nil {
		return nil, err
	}
	if s.Name != dir {
		return nil, fmt.Errorf("%w %s: name %q must be the folder's name %q", ErrInvalid, source, s.Name, dir)
	}
	s.dir = dir
	return s, nil
}

// File returns a file of the scenario's folder.
func (s *Scenario) File(name string) ([]byte, error) {
	return files.ReadFile(path.Join(s.dir, name))
}

// Source names a file of the scenario's folder in messages.
func (s *Scenario) Source(name string) string {
	return path.Join("scenarios", s.dir, name)
}
