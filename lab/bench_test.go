package lab_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// BenchmarkUp measures the default lab from Up to every node Ready, with
// the dralab binary already built (a warm build), and reports the lab's
// memory: the lab process (control plane) and each node process, as RSS
// once every node is Ready.
//
//	go test ./lab -run '^$' -bench Up -benchtime 3x
func BenchmarkUp(b *testing.B) {
	bin := binary(b)
	ctx := context.Background()
	root, err := os.MkdirTemp("", "dl-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(root)
	cfg := config.Default()
	cfg.Name = "bench"
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root), lab.WithBinary(bin), lab.WithOwner(os.Getpid()))
	if err != nil {
		b.Fatal(err)
	}
	var cpRSS, nodeRSS, driverRSS float64
	b.ResetTimer()
	for range b.N {
		if _, err := l.Up(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		st, err := l.Status(ctx)
		if err != nil {
			b.Fatal(err)
		}
		s, err := labstate.Dir(st.StateDir).ReadStatus()
		if err != nil {
			b.Fatal(err)
		}
		cpRSS += rssMiB(b, s.PID)
		nodes, drivers := 0.0, 0.0
		for _, p := range s.Processes {
			if p.Role == labstate.RoleNode {
				nodes++
			} else {
				drivers++
			}
		}
		for _, p := range s.Processes {
			if p.Role == labstate.RoleNode {
				nodeRSS += rssMiB(b, p.PID) / nodes
			} else {
				driverRSS += rssMiB(b, p.PID) / drivers
			}
		}
		if err := l.Down(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(cpRSS/n, "MiB-rss-controlplane")
	b.ReportMetric(nodeRSS/n, "MiB-rss-per-node")
	b.ReportMetric(driverRSS/n, "MiB-rss-per-driver")
	b.ReportMetric((cpRSS+(nodeRSS+driverRSS)*float64(len(cfg.Nodes)))/n, "MiB-rss-total")
}

func rssMiB(tb testing.TB, pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				tb.Fatal(err)
			}
			return float64(kb) / 1024
		}
	}
	tb.Fatalf("no VmRSS for pid %d", pid)
	return 0
}
