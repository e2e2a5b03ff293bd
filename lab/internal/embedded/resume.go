package embedded

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/status"
)

// undoRealNodes undoes what the real nodes of a lab whose process no
// longer runs did to the host. A lab process stopped by SIGTERM cleaned up
// after its real node; one that was killed did not. The node's host record
// says what to undo; the configuration is not needed (it may no longer
// validate).
func (b *Backend) undoRealNodes(ctx context.Context, dir labstate.Dir) error {
	nodes, _ := realnode.NodesWithHostRecords(dir)
	if len(nodes) == 0 {
		return nil
	}
	bin, err := b.binary(ctx)
	if err == nil {
		var out []byte
		out, err = exec.CommandContext(ctx, bin, "lab", "cleanup", "--state-dir="+string(dir)).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
	}
	if err != nil {
		return fmt.Errorf("cleaning up the real node of %s (its state is kept; retry with go run mage.go lab:down): %w", dir, err)
	}
	return nil
}

// resumable says why the state of a lab whose process no longer runs
// cannot be resumed, or "" when it can: the lab had come up (its last
// status is Running, or Failed after it was Running once: a resume that
// failed) with the configuration asked for now, its etcd data
// is there, and the test that owned it, if any, still runs. A lab that
// failed to start, was being stopped, or belonged to an ended test is
// deleted instead.
func (b *Backend) resumable(dir labstate.Dir, cfg *config.Config) string {
	st, err := dir.ReadStatus()
	switch {
	case err != nil:
		return fmt.Sprintf("no readable status (%v)", err)
	case st.Phase == labstate.PhaseFailed && st.CameUp:
		// A resume that failed kept the state for another try.
	case st.Phase != labstate.PhaseRunning:
		return "its last status is " + st.Phase
	case st.ConfigHash != cfg.Hash():
		return "it ran another configuration"
	}
	if _, err := os.Stat(dir.Etcd()); err != nil {
		return fmt.Sprintf("no etcd data (%v)", err)
	}
	owner, owned, err := dir.ReadOwner()
	switch {
	case err != nil:
		return err.Error()
	case owned && !owner.Alive():
		return "its owner " + owner.String() + " has ended"
	case owned && b.owner != owner.PID:
		return "it belongs to " + owner.String()
	}
	return ""
}

// keepForResume stops what a resume that failed started and keeps the
// lab's state, marked Failed after having come up, so that the next Up
// resumes it again: its etcd data, CA and allocations are what resuming
// is for.
func (b *Backend) keepForResume(ctx context.Context, dir labstate.Dir, cause error) error {
	ctx = context.WithoutCancel(ctx)
	var procs []procid.ID
	if id, err := dir.ReadProcess(); err == nil {
		procs = append(procs, id)
	}
	st, err := dir.ReadStatus()
	if err == nil {
		for _, p := range st.Processes {
			procs = append(procs, p.ID)
		}
	} else {
		st = &labstate.Status{}
	}
	if err := procid.Stop(ctx, procs, stopTimeout); err != nil {
		return fmt.Errorf("stopping the resumed lab of %s: %w", dir, err)
	}
	if err := b.undoRealNodes(ctx, dir); err != nil {
		return err
	}
	st.Phase, st.CameUp, st.Message = labstate.PhaseFailed, true, "resuming failed: "+cause.Error()
	for i := range st.Processes {
		st.Processes[i].Running = false
	}
	return dir.WriteStatus(st)
}

func hasRealNode(cfg *config.Config) bool {
	for _, n := range cfg.Nodes {
		if n.Kind == config.NodeReal {
			return true
		}
	}
	return false
}

func checkRealNodeHost() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: a real node runs on Linux only, not %s: use hollow nodes (kind: hollow), or DRALAB_BACKEND=kind with Docker Desktop", status.ErrHostNotReady, runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: a real node runs containers and needs root", status.ErrHostNotReady)
	}
	if missing := realnode.MissingHostPrograms(); len(missing) > 0 {
		return fmt.Errorf("%w: missing %s; install them with: go run mage.go deps:realnode", status.ErrHostNotReady, strings.Join(missing, ", "))
	}
	return nil
}
