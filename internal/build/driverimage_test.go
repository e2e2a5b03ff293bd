package build

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The driver's image carries the driver, built with cgo (its NVML
// inventory needs it), and every C library it loads, at the paths its
// dynamic loader looks for them, with the C libraries NVIDIA's NVML
// library loads beside them; each is this machine's file.
func TestDriverImageCarriesItsCLibraries(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("the driver image is Linux's; this is %s", runtime.GOOS)
	}
	img, err := driverImage(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bin := img.Files["/dralab-driver"]
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("ldd %s: %v: %s (the driver is not dynamically linked: built without cgo?)", bin, err, out)
	}
	var want []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				want = append(want, f)
			}
		}
	}
	if len(want) < 2 {
		t.Fatalf("ldd lists %q: want the C library and the dynamic loader at least", out)
	}
	libc := ""
	for _, p := range want {
		if filepath.Base(p) == "libc.so.6" {
			libc = filepath.Dir(p)
		}
	}
	for _, name := range []string{"libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"} {
		if p := filepath.Join(libc, name); libc != "" && exists(p) && !slices.Contains(want, p) {
			want = append(want, p)
		}
	}
	for _, p := range want {
		if src, ok := img.Files[p]; !ok || src != p {
			t.Errorf("the image lacks %s (it has %v)", p, img.Files)
		}
	}
	if len(img.Files) != len(want)+1 {
		t.Errorf("the image holds %d files, want the driver and %v", len(img.Files), want)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
