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
	if !running(pid) {
		t.Fatalf("the child %d is not running while its parent is", pid)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	for deadline := time.Now().Add(10 * time.Second); running(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the child %d still runs 10 s after its parent was killed", pid)
		}
	}
}

// running reports whether pid is a process that has not ended (a zombie
// has ended: it waits only to be reaped).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
