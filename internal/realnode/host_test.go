package realnode

import (
	"os"
	"path/filepath"
	"testing"
)

// Only the chains the kubelet creates are a real node's: a KUBE-* chain
// kube-proxy or another cluster's node makes on the host meanwhile is not
// recorded, so clean-up never removes it.
func TestKubeletChainsOnly(t *testing.T) {
	for c, want := range map[string]bool{
		"ipv4/mangle/KUBE-IPTABLES-HINT":  true,
		"ipv6/mangle/KUBE-KUBELET-CANARY": true,
		"ipv4/filter/KUBE-FIREWALL":       true,
		"nat/KUBE-KUBELET-CANARY":         true,
		"ipv4/nat/KUBE-SERVICES":          false,
		"ipv4/filter/KUBE-MARK-DROP":      false,
		"ipv4/nat/KUBE-IPTABLES-HINT":     false,
		"ipv4/filter/INPUT":               false,
	} {
		if got := kubeletChain(c); got != want {
			t.Errorf("kubeletChain(%q) = %v, want %v", c, got, want)
		}
	}
}

// Clean-up removes what the node made, by name: the kubelet's files and
// the driver's socket in the device-plugin directory, then the directory
// only where nothing else is left in it. Another device plugin's socket,
// and so the directory, stay. Before, the directory went whole.
func TestRemoveKubeletPathsByName(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "device-plugins")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ours := []string{filepath.Join(dir, "kubelet.sock"), filepath.Join(dir, "dralab-gpu.sock")}
	theirs := filepath.Join(dir, "nvidia-gpu.sock")
	for _, f := range append(ours, theirs) {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rec := &HostRecord{PathsCreated: append([]string{dir}, ours...)}
	if errs := removeKubeletPaths(rec); len(errs) != 0 {
		t.Fatalf("removing the node's paths: %v", errs)
	}
	for _, f := range ours {
		if _, err := os.Lstat(f); !os.IsNotExist(err) {
			t.Errorf("%s, the node's, is left", f)
		}
	}
	if _, err := os.Lstat(theirs); err != nil {
		t.Errorf("another device plugin's socket is gone: %v", err)
	}
	if err := os.Remove(theirs); err != nil {
		t.Fatal(err)
	}
	if errs := removeKubeletPaths(rec); len(errs) != 0 {
		t.Fatalf("removing the node's paths again: %v", errs)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the empty directory the node created is left: %v", err)
	}
}
