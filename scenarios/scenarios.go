package scenarios

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// files holds every built-in scenario folder.
//
//go:embed */scenario.yaml */*.yaml */README.md
var files embed.FS

// EnvDir names a folder of scenario folders that scenario:list,
// scenario:run and the e2e suite use instead of the built-in ones.
const EnvDir = "DRALAB_SCENARIOS"

// ErrNotFound means no scenario has the name asked for.
var ErrNotFound = errors.New("no such scenario")

// scenarioFile is the spec's file name in a scenario folder.
const scenarioFile = "scenario.yaml"

// All returns every built-in scenario, sorted by name; a scenario file that
// does not decode is an error naming it.
func All() ([]*Scenario, error) {
	return load(files, "scenarios")
}

// Get returns one built-in scenario.
func Get(name string) (*Scenario, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	return Find(all, name)
}

// Load returns the scenarios of fsys, sorted by name: each folder at its
// root that holds a scenario.yaml is one scenario, decoded and validated as
// the built-in ones are. Errors name files by their path in fsys.
func Load(fsys fs.FS) ([]*Scenario, error) {
	return load(fsys, "")
}

// LoadDir is Load of a folder on disk; errors name files by their path.
func LoadDir(dir string) ([]*Scenario, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("scenario folder: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("scenario folder %s is a file: name the folder that holds one folder per scenario", dir)
	}
	return load(os.DirFS(dir), filepath.Clean(dir))
}

// Selected returns the scenarios of the folder EnvDir names when it is set,
// else the built-in ones, and says which it chose ("built-in" or the path).
func Selected() ([]*Scenario, string, error) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		all, err := All()
		return all, "built-in", err
	}
	all, err := LoadDir(dir)
	if err != nil {
		return nil, "", fmt.Errorf("%s=%s: %w", EnvDir, dir, err)
	}
	return all, dir, nil
}

// Find returns the scenario of all named name, or an error wrapping
// ErrNotFound that lists the names there are.
func Find(all []*Scenario, name string) (*Scenario, error) {
	var names []string
	for _, s := range all {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return nil, fmt.Errorf("%w %q; scenarios: %s", ErrNotFound, name, strings.Join(names, ", "))
}

// Names lists the scenarios' names.
func Names(all []*Scenario) []string {
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
	}
	return names
}

// load reads every scenario folder of fsys; prefix names fsys's root in
// messages.
func load(fsys fs.FS, prefix string) ([]*Scenario, error) {
	specs, err := fs.Glob(fsys, "*/"+scenarioFile)
	if err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		where := prefix
		if where == "" {
			where = "the scenario folder"
		}
		if _, err := fs.Stat(fsys, scenarioFile); err == nil {
			return nil, fmt.Errorf("%w: %s is one scenario's folder: name the folder that holds it (and any others), one folder per scenario", ErrInvalid, where)
		}
		return nil, fmt.Errorf("%w: %s holds no scenario: each scenario is a folder with a %s", ErrInvalid, where, scenarioFile)
	}
	var out []*Scenario
	for _, p := range specs {
		s, err := loadOne(fsys, prefix, path.Dir(p))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func loadOne(fsys fs.FS, prefix, dir string) (*Scenario, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	source := joinSource(prefix, dir, scenarioFile)
	data, err := fs.ReadFile(fsys, path.Join(dir, scenarioFile))
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
	s.fsys, s.dir, s.prefix = fsys, dir, prefix
	if err := s.checkManifests(); err != nil {
		return nil, err
	}
	return s, nil
}

// File returns a file of the scenario's folder.
func (s *Scenario) File(name string) ([]byte, error) {
	if s.fsys == nil {
		return nil, fmt.Errorf("scenario %s was parsed, not loaded from a folder: it has no file %s", s.Name, name)
	}
	data, err := fs.ReadFile(s.fsys, path.Join(s.dir, name))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Source(name), err)
	}
	return data, nil
}

// Source names a file of the scenario's folder in messages.
func (s *Scenario) Source(name string) string {
	return joinSource(s.prefix, s.dir, name)
}

// joinSource names a file dir/name of a scenario root called prefix: a
// slash path for the built-in ones, a path of the system's for a folder.
func joinSource(prefix, dir, name string) string {
	if prefix == "" || prefix == "scenarios" {
		return path.Join(prefix, dir, name)
	}
	return filepath.Join(prefix, dir, name)
}
