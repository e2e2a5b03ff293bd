package kindcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/internal/backend"
	"github.com/dralab/dralab/lab/status"
)

// The operations, dralab-kind's first argument; the second is the state
// root.
const (
	opUp          = "up"           // stdin: the configuration, as JSON
	opDown        = "down"         // name
	opStatus      = "status"       // name
	opLogs        = "logs"         // name, directory
	opReadFaults  = "read-faults"  // name, node
	opWriteFaults = "write-faults" // name, node; stdin: the file (empty: none)
	opNodeImage   = "node-image"   // (none)
)

// message is one line of dralab-kind's output.
type message struct {
	// Step begins progress step ID; Done ends it, with Error when it failed.
	ID   int    `json:"id,omitempty"`
	Step string `json:"step,omitempty"`
	Done bool   `json:"done,omitempty"`
	// OK ends a successful operation, with its Result; Error without Done
	// is why it failed.
	OK     bool            `json:"ok,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

// faultsFile is a node's GPU faults file and where it lies.
type faultsFile struct {
	Where string `json:"where"`
	Data  []byte `json:"data"`
}

// conditions are the errors a caller tells apart with errors.Is; an error
// keeps them across the process boundary by name.
var conditions = map[string]error{
	"no-engine":       status.ErrNoEngine,
	"config-mismatch": status.ErrConfigMismatch,
	"port-in-use":     status.ErrPortInUse,
	"host-not-ready":  status.ErrHostNotReady,
	"path-too-long":   status.ErrPathTooLong,
	"degraded":        status.ErrDegraded,
	"invalid-config":  config.ErrInvalid,
	"canceled":        context.Canceled,
	"deadline":        context.DeadlineExceeded,
}

// wireError is an error as it crosses: its text and the conditions it
// wraps.
type wireError struct {
	Message string   `json:"message"`
	Is      []string `json:"is,omitempty"`
}

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Message: err.Error()}
	for name, cond := range conditions {
		if errors.Is(err, cond) {
			w.Is = append(w.Is, name)
		}
	}
	return w
}

func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	e := &remoteError{msg: w.Message}
	for _, name := range w.Is {
		if cond, ok := conditions[name]; ok {
			e.is = append(e.is, cond)
		}
	}
	return e
}

// remoteError is an error dralab-kind reported.
type remoteError struct {
	msg string
	is  []error
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool {
	for _, c := range e.is {
		if c == target {
			return true
		}
	}
	return false
}

// Backend is what dralab-kind serves: a lab backend whose nodes' GPU
// faults files it reads and writes.
type Backend interface {
	backend.Backend
	// ReadGPUFaults returns the node's faults file (nil when there is
	// none) and where it lies, for messages.
	ReadGPUFaults(ctx context.Context, name, node string) (data []byte, where string, err error)
	// WriteGPUFaults replaces it (nil: removes it).
	WriteGPUFaults(ctx context.Context, name, node string, data []byte) error
	// NodeImage builds the node image of the lab's own Kubernetes, or
	// finds it built, and loads it into the container engine that answers.
	NodeImage(ctx context.Context, progress ui.Progress) (NodeImage, error)
}

// NodeImage is a kind node image of the lab's own Kubernetes.
type NodeImage struct {
	// Name is its reference; Archive its OCI archive (for save and load),
	// of Size bytes.
	Name    string `json:"name"`
	Archive string `json:"archive"`
	Size    int64  `json:"size"`
	// Reused: the archive was built before, of the same inputs.
	Reused bool `json:"reused,omitempty"`
	// Engine is the container engine it is loaded into; "" where none
	// answers (Why says what each said).
	Engine string `json:"engine,omitempty"`
	Why    string `json:"why,omitempty"`
}

// Serve is dralab-kind: it runs the operation args name on the backend
// newBackend returns for the state root args name, and writes its
// progress and outcome to stdout. It returns the exit status: 2 for a
// request it cannot read, 1 for a failed operation.
func Serve(ctx context.Context, newBackend func(root string) Backend, args []string, stdin io.Reader, stdout io.Writer) int {
	w := &writer{enc: json.NewEncoder(stdout)}
	fail := func(code int, err error) int {
		w.send(message{Error: toWire(err)})
		return code
	}
	want := map[string]int{opUp: 0, opDown: 1, opStatus: 1, opLogs: 2, opReadFaults: 2, opWriteFaults: 2, opNodeImage: 0}
	if len(args) < 2 {
		return fail(2, fmt.Errorf("usage: dralab-kind up|down|status|logs|read-faults|write-faults|node-image STATE-ROOT [ARGS]"))
	}
	op, root, args := args[0], args[1], args[2:]
	n, ok := want[op]
	if !ok || len(args) != n {
		return fail(2, fmt.Errorf("dralab-kind %s: unknown operation or %d arguments", op, len(args)))
	}
	b := newBackend(root)
	var result any
	var err error
	switch op {
	case opUp:
		var data []byte
		if data, err = io.ReadAll(stdin); err != nil {
			return fail(2, err)
		}
		cfg, perr := config.Parse("the kind lab's configuration", data)
		if perr != nil {
			return fail(2, perr)
		}
		result, err = b.Up(ctx, cfg, w.progress)
	case opDown:
		err = b.Down(ctx, args[0])
	case opStatus:
		result, err = b.Status(ctx, args[0])
	case opLogs:
		err = b.CollectLogs(ctx, args[0], args[1])
	case opReadFaults:
		var f faultsFile
		f.Data, f.Where, err = b.ReadGPUFaults(ctx, args[0], args[1])
		result = f
	case opWriteFaults:
		var data []byte
		if data, err = io.ReadAll(stdin); err != nil {
			return fail(2, err)
		}
		if len(data) == 0 {
			data = nil
		}
		err = b.WriteGPUFaults(ctx, args[0], args[1], data)
	case opNodeImage:
		result, err = b.NodeImage(ctx, w.progress)
	}
	if err != nil {
		return fail(1, err)
	}
	raw, err := json.Marshal(result)
	if err != nil {
		return fail(1, err)
	}
	w.send(message{OK: true, Result: raw})
	return 0
}

// writer sends messages, one per line, from any goroutine.
type writer struct {
	mu   sync.Mutex
	enc  *json.Encoder
	last int
}

func (w *writer) send(m message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Nothing reads a broken pipe: the caller has gone.
	_ = w.enc.Encode(m)
}

func (w *writer) progress(step string) func(error) {
	w.mu.Lock()
	w.last++
	id := w.last
	w.mu.Unlock()
	w.send(message{ID: id, Step: step})
	return func(err error) { w.send(message{ID: id, Done: true, Error: toWire(err)}) }
}

var _ ui.Progress = (&writer{}).progress
