package labserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dralab/dralab/internal/labstate"
)

// TestPortTakenStartsAgainOnAnotherPort: a node whose port was taken
// between the lab finding it free and the node binding it (it exits with
// Go's "address already in use") is started again at once with a new
// port; a node that fails otherwise is not.
func TestPortTakenStartsAgainOnAnotherPort(t *testing.T) {
	dir := labstate.Dir(t.TempDir())
	if err := os.MkdirAll(dir.Logs(), 0o700); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	// The node: fails as the kubelet does on a taken port, else runs.
	const node = `if [ "$1" = "$2" ]; then echo "listen tcp 127.0.0.1:$1: bind: address already in use"; exit 1; fi; exec sleep 600`
	// The supervisor calls rebind from the goroutine that waits for the
	// process: the test reads the ports it gave under a lock.
	var mu sync.Mutex
	ports := []int{takenPort}
	rebinds := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ports)
	}
	rebind := func() ([]string, []string, error) {
		port, err := freePort()
		mu.Lock()
		ports = append(ports, port)
		mu.Unlock()
		return []string{"-c", node, "node", strconv.Itoa(port), strconv.Itoa(takenPort)}, nil, err
	}
	ctx := context.Background()
	s := newSupervisor(Options{Dir: dir})
	p := &process{role: labstate.RoleNode, node: "n1", bin: "/bin/sh", rebind: rebind,
		args: []string{"-c", node, "node", strconv.Itoa(takenPort), strconv.Itoa(takenPort)}}
	if err := s.startProcess(ctx, p); err != nil {
		t.Fatal(err)
	}
	defer s.stop(ctx, time.Second, labstate.RoleNode)
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		st := s.statuses()[0]
		return st.Running && len(rebinds()) == 2, nil
	})
	if err != nil {
		log, _ := os.ReadFile(dir.Log("node-n1"))
		t.Fatalf("the node was not started again on another port (ports %v, status %+v): %v\n%s", rebinds(), s.statuses(), err, log)
	}
	s.mu.Lock() // rebind sets the process's arguments under the supervisor's lock
	args := slices.Clone(p.args)
	s.mu.Unlock()
	if got := fmt.Sprint(args); got == fmt.Sprint([]string{"-c", node, "node", strconv.Itoa(takenPort), strconv.Itoa(takenPort)}) {
		t.Errorf("the node runs with its old arguments %s", got)
	}

	// A node that fails for another reason stays down.
	other := &process{role: labstate.RoleNode, node: "n2", bin: "/bin/sh", rebind: rebind, args: []string{"-c", "echo no GPUs; exit 1"}}
	if err := s.startProcess(ctx, other); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return !s.isRunning(other), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // a wrongful restart would have happened by now
	if s.isRunning(other) || len(rebinds()) != 2 {
		t.Errorf("a node that failed without a port conflict was started again (ports %v)", rebinds())
	}
}

// TestRestartDelay: a process that keeps failing on start is started again
// after 1, 2, 4 … seconds, never more than 30; one that had run stably is
// started again after a second.
func TestRestartDelay(t *testing.T) {
	for crashes, want := range map[int]time.Duration{
		0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		5: 16 * time.Second, 6: 30 * time.Second, 100: 30 * time.Second,
	} {
		if got := restartDelay(crashes); got != want {
			t.Errorf("restartDelay(%d) = %s, want %s", crashes, got, want)
		}
	}
}
