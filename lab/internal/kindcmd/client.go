// Package kindcmd runs the kind backend as a program of its own,
// dralab-kind, which the lab builds the first time a kind lab is used.
// The kind backend is the only user of kind and of Helm's install action
// (and, through it, of a WebAssembly runtime, kustomize and an OCI
// registry client): linked into the lab package they were compiled before
// a workshop's first embedded lab:up could start, by mage and again into
// the dralab binary. Client is the backend the lab package holds; Serve is
// the program's side.
//
// The two talk over the program's standard streams: the request's
// configuration on stdin, and on stdout one JSON message per line (a
// progress step begun or done, the result, or an error that keeps the
// conditions the lab exports, such as status.ErrNoEngine).
package kindcmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/internal/backend"
	"github.com/dralab/dralab/lab/status"
)

// Capabilities are the kind backend's, as both sides report them.
var Capabilities = backend.Capabilities{RealNodes: true, NeedsDocker: true}

// Kubeconfig is where a kind lab's kubeconfig lives under root.
func Kubeconfig(root, name string) string { return filepath.Join(root, name, "kubeconfig") }

// stopGrace is how long an interrupted dralab-kind may take to end its
// step (kind deletes a cluster it could not finish creating) before it is
// killed.
const stopGrace = time.Minute

// Client is the kind backend, run in dralab-kind.
type Client struct {
	root   string
	binary func(context.Context) (string, error)
}

var (
	_ backend.Backend    = &Client{}
	_ backend.GPUFaulter = &Client{}
)

// New returns the backend for labs under root; binary returns the path of
// an up-to-date dralab-kind (building it the first time).
func New(root string, binary func(context.Context) (string, error)) *Client {
	return &Client{root: root, binary: binary}
}

// Name implements backend.Backend.
func (c *Client) Name() string { return config.BackendKind }

// Capabilities implements backend.Backend.
func (c *Client) Capabilities() backend.Capabilities { return Capabilities }

// Kubeconfig implements backend.Backend.
func (c *Client) Kubeconfig(name string) string { return Kubeconfig(c.root, name) }

// Up implements backend.Backend.
func (c *Client) Up(ctx context.Context, cfg *config.Config, progress ui.Progress) (status.UpResult, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return status.UpResult{}, err
	}
	var r status.UpResult
	err = c.call(ctx, progress, data, &r, opUp)
	return r, err
}

// Down implements backend.Backend.
func (c *Client) Down(ctx context.Context, name string) error {
	return c.call(ctx, ui.NoProgress, nil, nil, opDown, name)
}

// Status implements backend.Backend.
func (c *Client) Status(ctx context.Context, name string) (*status.Status, error) {
	var st status.Status
	if err := c.call(ctx, ui.NoProgress, nil, &st, opStatus, name); err != nil {
		return nil, err
	}
	return &st, nil
}

// CollectLogs implements backend.Backend.
func (c *Client) CollectLogs(ctx context.Context, name, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	return c.call(ctx, ui.NoProgress, nil, nil, opLogs, name, abs)
}

// UpdateGPUFaults implements backend.GPUFaulter: the node's faults file
// read, changed here and written back.
func (c *Client) UpdateGPUFaults(ctx context.Context, name, node string, update func(map[string]gpu.GPUFault)) error {
	var f faultsFile
	if err := c.call(ctx, ui.NoProgress, nil, &f, opReadFaults, name, node); err != nil {
		return err
	}
	data, err := gpu.UpdateFaults(f.Where, f.Data, update)
	if err != nil {
		return err
	}
	return c.call(ctx, ui.NoProgress, data, nil, opWriteFaults, name, node)
}

// NodeImage builds the node image of the lab's own Kubernetes (or finds it
// built) and loads it into the container engine that answers.
func (c *Client) NodeImage(ctx context.Context, progress ui.Progress) (NodeImage, error) {
	var img NodeImage
	err := c.call(ctx, progress, nil, &img, opNodeImage)
	return img, err
}

// call runs dralab-kind op args with stdin, shows its progress steps and
// decodes its result into result (when not nil).
func (c *Client) call(ctx context.Context, progress ui.Progress, stdin []byte, result any, op string, args ...string) error {
	bin, err := c.binary(ctx)
	if err != nil {
		return fmt.Errorf("building dralab-kind, the kind backend's program: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{op, c.root}, args...)...)
	// Interrupted, it ends its step itself; killed only if it does not.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = stopGrace
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var (
		steps   = map[int]func(error){}
		res     json.RawMessage
		opErr   error
		decoded bool
	)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			opErr = fmt.Errorf("dralab-kind %s: undecodable line %q: %w", op, sc.Text(), err)
			break
		}
		switch {
		case m.Step != "":
			steps[m.ID] = progress(m.Step)
		case m.Done:
			if done := steps[m.ID]; done != nil {
				done(m.Error.err())
				delete(steps, m.ID)
			}
		case m.OK:
			res, decoded = m.Result, true
		case m.Error != nil:
			opErr, decoded = m.Error.err(), true
		}
	}
	// The rest is read, so that the program never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, out)
	waitErr := cmd.Wait()
	for _, done := range steps {
		done(errors.New("dralab-kind ended during this step"))
	}
	switch {
	case opErr != nil:
		return opErr
	case ctx.Err() != nil:
		return ctx.Err()
	case waitErr != nil || !decoded:
		return fmt.Errorf("dralab-kind %s: %v; its last output: %s", op, waitErr, tail(stderr.String()))
	case result != nil:
		if err := json.Unmarshal(res, result); err != nil {
			return fmt.Errorf("dralab-kind %s: decoding its result: %w", op, err)
		}
	}
	return nil
}

// tail is the end of a program's error output, enough to say why it
// failed.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "(nothing)"
	}
	const max = 2000
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	return s
}
