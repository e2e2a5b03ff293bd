package nicapp

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The hook puts the NIC's interface, named, addressed and with its
// hardware address, into the network namespace of the container's process;
// a second container of the pod finds it there; the host keeps only the
// pair's other end, which goes with the namespace. Bad arguments create
// nothing.
func TestAttachPutsTheInterfaceInTheContainersNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("creating network namespaces and veth pairs needs root; run the tests as root (CI does)")
	}
	// A process in a network namespace of its own stands in for the
	// container.
	sleeper := exec.Command("unshare", "--net", "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	var ns netns.NsHandle
	self, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ns, err = netns.GetFromPid(sleeper.Process.Pid); err == nil && !ns.Equal(self) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process never got a network namespace of its own: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer ns.Close()
	state := fmt.Sprintf(`{"ociVersion":"1.2.0","id":"c1","status":"creating","pid":%d,"bundle":"/x"}`, sleeper.Process.Pid)
	a := Attachment{Interface: "enp24s0f0np0", Address: "10.100.31.85/16", HardwareAddress: "02:25:c4:33:d4:94"}

	if err := Attach(strings.NewReader(state), Attachment{Interface: "enp24s0f0np0", Address: "10.100.31.85", HardwareAddress: a.HardwareAddress}); err == nil || !strings.Contains(err.Error(), "--address") {
		t.Errorf("an address without its prefix length: %v", err)
	}
	if err := Attach(strings.NewReader(state), a); err != nil {
		t.Fatal(err)
	}
	inside, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	link, err := inside.LinkByName(a.Interface)
	if err != nil {
		t.Fatalf("the container's namespace has no %s: %v", a.Interface, err)
	}
	if got := link.Attrs().HardwareAddr.String(); got != a.HardwareAddress {
		t.Errorf("hardware address %s, want %s", got, a.HardwareAddress)
	}
	if link.Attrs().Flags&(1<<0) == 0 {
		t.Errorf("%s is down", a.Interface)
	}
	addrs, err := inside.AddrList(link, netlink.FAMILY_V4)
	if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != a.Address {
		t.Errorf("addresses %v (%v), want %s", addrs, err, a.Address)
	}
	host, _ := vethNames("c1", a.Interface)
	if _, err := netlink.LinkByName(host); err != nil {
		t.Errorf("the host has no %s, the pair's other end: %v", host, err)
	}
	// The pod's second container: the interface is there already.
	if err := Attach(strings.NewReader(strings.Replace(state, `"c1"`, `"c2"`, 1)), a); err != nil {
		t.Errorf("a second container of the pod: %v", err)
	}
	if other, _ := vethNames("c2", a.Interface); other != host {
		if _, err := netlink.LinkByName(other); err == nil {
			t.Errorf("the second container's hook made another pair, %s", other)
		}
	}
	// The namespace goes with its last process (and the last handle on
	// it), and the pair with it.
	inside.Close()
	ns.Close()
	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()
	deadline = time.Now().Add(5 * time.Second)
	for {
		if _, err := netlink.LinkByName(host); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still on the host after the namespace went", host)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
