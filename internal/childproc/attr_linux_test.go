package childproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dralab/dralab/internal/procid"
)

// A child started with Attr ends when its parent is killed: the test
// runs itself as a parent that starts a long sleep, kills that parent,
// and watches the sleep end.
func TestChildEndsWithItsKilledParent(t *testing.T) {
	if os.Getenv("CHILDPROC_TEST_PARENT") == "1" {
		child := exec.Command("sleep", "300")
		child.SysProcAttr = Attr()
		if err := child.Start(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(child.Process.Pid)
		time.Sleep(5 * time.Minute) // until killed
		return
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestChildEndsWithItsKilledParent$")
	parent.Env = append(os.Environ(), "CHILDPROC_TEST_PARENT=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's PID from the parent: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the parent said %q", line)
	}
	// The child's identity, recorded while it runs: its PID alone could be
	// another process's by the time it is checked again.
	child, err := procid.Of(pid)
	if err != nil {
		t.Fatalf("the child %d is not running while its parent is: %v", pid, err)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	for deadline := time.Now().Add(10 * time.Second); child.Alive(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the child %d still runs 10 s after its parent was killed", pid)
		}
	}
}
