package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/status"
)

// BenchmarkKindUp measures the default lab on the kind backend, beside
// BenchmarkUp's embedded one: the node image of the lab's own Kubernetes
// built (s-image; cold where DRALAB_BENCH_COLD=1 removes its cached
// archives first) and loaded, lab:up to every node Ready with its GPUs
// published (the op), and the memory of the nodes' processes (every process
// in a node container's cgroup: its PSS and RSS, as BenchmarkUp reads the
// embedded lab's). Where no container engine answers it says so and skips.
func BenchmarkKindUp(b *testing.B) {
	binary(b)
	ctx := context.Background()
	root, err := os.MkdirTemp("", "dl-kbench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(root)
	cfg := config.Default()
	cfg.Name = "dralab-bench-kind"
	cfg.Backend = config.BackendKind
	if err := cfg.Complete(); err != nil {
		b.Fatal(err)
	}
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root))
	if err != nil {
		b.Fatal(err)
	}
	if st, err := l.Status(ctx); err != nil {
		b.Fatal(err)
	} else if st.Phase == status.PhaseAbsent && st.Message != "" {
		b.Skipf("no container engine answers here: %s", st.Message)
	}
	if os.Getenv("DRALAB_BENCH_COLD") == "1" {
		cache, err := os.UserCacheDir()
		if err != nil {
			b.Fatal(err)
		}
		old, _ := filepath.Glob(filepath.Join(cache, "dralab", "kind-node", "*.tar"))
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				b.Fatal(err)
			}
		}
	}
	start := time.Now()
	img, err := lab.BuildKindNodeImage(ctx, lab.WithStateRoot(root))
	if err != nil {
		b.Fatal(err)
	}
	imageTime := time.Since(start)
	cfg.NodeImage = img.Name
	var total, perNode memory
	b.ResetTimer()
	for range b.N {
		if _, err := l.Up(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		out, err := exec.Command(img.Engine, "ps", "-q", "--filter", "label=io.x-k8s.kind.cluster="+cfg.Name, "--format", "{{.Names}}").Output()
		if err != nil {
			b.Fatal(err)
		}
		nodes := strings.Fields(string(out))
		for _, node := range nodes {
			m := containerMemory(b, img.Engine, node)
			total.add(m, 1)
			if !strings.HasSuffix(node, "control-plane") {
				perNode.add(m, 1/float64(len(nodes)-1))
			}
		}
		if err := l.Down(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(imageTime.Seconds(), "s-image")
	b.ReportMetric(total.pss/n, "MiB-pss-total")
	b.ReportMetric(total.rss/n, "MiB-rss-total")
	b.ReportMetric(perNode.pss/n, "MiB-pss-per-worker")
}

// containerMemory sums the memory of every process in a container's
// memory cgroup and those below it (its pods').
func containerMemory(tb testing.TB, engine, name string) memory {
	out, err := exec.Command(engine, "inspect", "--format", "{{.State.Pid}}", name).Output()
	if err != nil {
		tb.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		tb.Fatal(err)
	}
	// systemd, the node's init, moves itself into init.scope below the
	// container's cgroup.
	group := strings.TrimSuffix(memoryCgroup(pid), "/init.scope")
	if group == "" {
		tb.Fatalf("container %s: no memory cgroup of process %d", name, pid)
	}
	var m memory
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		n, _ := strconv.Atoi(filepath.Base(p))
		if g := memoryCgroup(n); g == group || strings.HasPrefix(g, group+"/") {
			if pm, ok := processMemory(n); ok {
				m.add(pm, 1)
			}
		}
	}
	return m
}

// memoryCgroup is a process's memory cgroup (cgroup v1's memory
// controller, or v2's one hierarchy).
func memoryCgroup(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[1] == "memory" || parts[0] == "0" && parts[1] == "") {
			return parts[2]
		}
	}
	return ""
}

// processMemory reads a process's PSS and RSS from
// /proc/PID/smaps_rollup; false where it has gone or reads no such lines.
func processMemory(pid int) (memory, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return memory{}, false
	}
	var m memory
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		for field, to := range map[string]*float64{"Rss:": &m.rss, "Pss:": &m.pss} {
			if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
				kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
				if err != nil {
					return memory{}, false
				}
				*to = float64(kb) / 1024
				found++
			}
		}
	}
	return m, found == 2
}
