//go:build mage

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/internal/drametrics"
	"github.com/dralab/dralab/internal/podresources"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab"
)

// Lab creates, inspects and deletes labs. lab:up's configuration is
// $DRALAB_CONFIG, or lab/examples/default.yaml when unset. lab:down,
// lab:status and lab:kubeconfig act on the lab named by $DRALAB_LAB, else
// that of $DRALAB_CONFIG, else the only lab on this machine.
type Lab mg.Namespace

// Up brings up the lab, or reuses it if it already runs with the same
// configuration. DRALAB_BACKEND=kind uses kind (Docker) instead of the
// embedded backend; DRALAB_RETAIN=1 keeps a lab that failed to come up.
func (Lab) Up(ctx context.Context) error {
	u := ui.Stderr()
	l, err := lab.New(lab.WithProgress(u.Step), lab.WithRetain(os.Getenv("DRALAB_RETAIN") != ""))
	if err != nil {
		return err
	}
	cfg := l.Config()
	u.Println(fmt.Sprintf("Creating lab %q (%d nodes) on the %s backend (%s), from %s", cfg.Name, len(cfg.Nodes), l.Backend(), l.BackendReason(), l.ConfigSource()))
	res, err := l.Up(ui.WithLive(ctx, u.Live))
	if err != nil {
		return err
	}
	intro := fmt.Sprintf("Lab %q is ready.", cfg.Name)
	if res.Reused {
		intro = fmt.Sprintf("Lab %q was already running with this configuration; reused it.", cfg.Name)
	}
	next := []string{
		"export KUBECONFIG=" + l.Kubeconfig(),
		"kubectl get nodes",
		"kubectl api-resources --api-group=resource.k8s.io",
	}
	if url, err := l.DashboardURL(); err == nil {
		next = append(next, "open "+url+"    # the live dashboard (go run mage.go lab:dashboard prints it)")
	} else if errors.Is(err, lab.ErrNoDashboard) {
		next = append(next, "go run mage.go lab:dashboard    # serves the live dashboard and prints its URL")
	}
	next = append(next, "go run mage.go lab:status    # and lab:down when done")
	u.Next(intro+" Next:", next...)
	return nil
}

// Down stops every process of the lab and deletes its state. With
// several labs, name one: DRALAB_LAB=<name> go run mage.go lab:down.
func (Lab) Down(ctx context.Context) error {
	u := ui.Stderr()
	l, err := lab.Existing()
	if err != nil {
		return err
	}
	done := u.Step(fmt.Sprintf("Deleting lab %q", l.Config().Name))
	err = l.Down(ctx)
	done(err)
	return err
}

// Status tells whether the lab runs, and how its nodes are.
func (Lab) Status(ctx context.Context) error {
	l, err := lab.Existing()
	if err != nil {
		return err
	}
	st, err := l.Status(ctx)
	if err != nil {
		return err
	}
	if err := st.Write(os.Stdout); err != nil {
		return err
	}
	if st.Phase == "Absent" {
		fmt.Println("\nNo lab. Create one with: go run mage.go lab:up")
	}
	return nil
}

// Kubeconfig prints the path of the lab's kubeconfig and nothing else.
func (Lab) Kubeconfig() error {
	l, err := lab.Existing()
	if err != nil {
		return err
	}
	fmt.Println(l.Kubeconfig())
	return nil
}

// Dashboard prints the URL of the lab's live dashboard (its token
// included) and nothing else: open it in a browser on this machine. The
// embedded lab's process serves it; for a kind lab this target serves it
// itself, until interrupted.
func (Lab) Dashboard(ctx context.Context) error {
	l, err := lab.Existing()
	if err != nil {
		return err
	}
	url, err := l.DashboardURL()
	if errors.Is(err, lab.ErrNoDashboard) {
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		if url, err = l.ServeDashboard(ctx); err != nil {
			return err
		}
		fmt.Println(url)
		ui.Stderr().Println("Serving the dashboard of lab " + l.Config().Name + " until Ctrl-C.")
		<-ctx.Done()
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Println(url)
	return nil
}

// Podresources asks a node's kubelet, through its podresources API (what
// monitoring agents read), which DRA devices each container got: claim,
// driver, pool, device, share and CDI devices.
func (Lab) Podresources(ctx context.Context, node string) error {
	l, err := lab.Existing()
	if err != nil {
		return err
	}
	socket, err := l.PodResourcesSocket(node)
	if err != nil {
		return err
	}
	rows, err := podresources.List(ctx, socket)
	if err != nil {
		return err
	}
	return podresources.Write(os.Stdout, rows)
}

// Metrics prints, live, what the lab counts about claims: per node the
// kubelet's DRA prepare and unprepare operations (count, mean time),
// errors and claims in use, and the drivers' own prepare calls; then the
// scheduler's DynamicResources plugin evaluations.
func (Lab) Metrics(ctx context.Context) error {
	l, err := lab.Existing()
	if err != nil {
		return err
	}
	snap, err := drametrics.Read(ctx, l.Kubeconfig(), l.NodeNames(), l.DriverMetrics)
	if err != nil {
		return err
	}
	return drametrics.Write(os.Stdout, snap)
}

// List lists the labs on this machine: name, backend, phase and nodes.
func (Lab) List(ctx context.Context) error {
	labs, err := lab.List(ctx)
	if err != nil {
		return err
	}
	if len(labs) == 0 {
		fmt.Println("No labs. Create one with: go run mage.go lab:up")
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tBACKEND\tPHASE\tNODES\tSTATE")
	for _, st := range labs {
		ready := 0
		for _, n := range st.Nodes {
			if n.Ready == "True" {
				ready++
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d/%d Ready\t%s\n", st.Name, st.Backend, st.Phase, ready, len(st.Nodes), st.StateDir)
	}
	return w.Flush()
}
