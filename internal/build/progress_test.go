package build

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// go build -v's stderr: package names, and the lines of a failure, which
// are not packages.
func TestCounterCountsCompiledPackages(t *testing.T) {
	var mu sync.Mutex
	var got []Progress
	c := newCounter(context.Background(), func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, p)
	}, "", nil, []string{"github.com/dralab/dralab/internal/build"})
	for _, chunk := range []string{"internal/goarch\nk8s.io/api/core", "/v1\n# github.com/x/y\n", "y/y.go:3:2: undefined: z\n", "github.com/x/y\n"} {
		if _, err := c.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	// The first report comes at once; the graph's count a moment later.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.tell()
		mu.Lock()
		last := got[len(got)-1]
		mu.Unlock()
		if last.Total > 0 || time.Now().After(deadline) {
			if last.Compiled != 3 {
				t.Errorf("compiled = %d, want 3 (internal/goarch, k8s.io/api/core/v1, github.com/x/y)", last.Compiled)
			}
			if last.Total < 10 {
				t.Errorf("total = %d, want the packages internal/build depends on, std included", last.Total)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.stop()
}

func TestProgressSays(t *testing.T) {
	for _, c := range []struct {
		p    Progress
		want []string
		not  []string
	}{
		{Progress{Compiled: 7, Elapsed: 3 * time.Second}, []string{"the first time, and after a change", "7 packages", "3s so far"}, []string{"left"}},
		{Progress{Compiled: 1, Elapsed: time.Second}, []string{", 1 package, 1s so far"}, []string{"packages"}},
		{Progress{Compiled: 500, Total: 2000, Elapsed: 5 * time.Minute}, []string{"500 of at most 2000 packages", "5m0s so far", "at most about 15 min left"}, nil},
		{Progress{Compiled: 2000, Total: 2000, Elapsed: 5 * time.Minute}, []string{"2000 of at most 2000"}, []string{"left"}},
		{Progress{Compiled: 1444, Total: 3111, Elapsed: 6 * time.Minute, Idle: 30 * time.Second}, []string{"1444 of at most 3111", "now linking"}, []string{"left"}},
	} {
		s := c.p.String()
		for _, w := range c.want {
			if !strings.Contains(s, w) {
				t.Errorf("%+v says %q, lacks %q", c.p, s, w)
			}
		}
		for _, n := range c.not {
			if strings.Contains(s, n) {
				t.Errorf("%+v says %q, should not say %q", c.p, s, n)
			}
		}
	}
}

// A build that fails says why: the compiler's words are in the error,
// whether or not the build reports its progress.
func TestFailedBuildSaysWhy(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":  "module example.com/broken\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() { undefinedThing() }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	for _, report := range []func(Progress){nil, func(Progress) {}} {
		err := goReporting(context.Background(), report, filepath.Join(dir, "out"), "example.com/broken")
		if err == nil || !strings.Contains(err.Error(), "main.go:3:15: undefined: undefinedThing") {
			t.Errorf("reporting %v: the error %q does not quote the compiler", report != nil, err)
		}
	}
}
