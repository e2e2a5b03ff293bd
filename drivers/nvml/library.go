package nvml

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Library is NVML's library, as the NVIDIA driver installs it.
const Library = "libnvidia-ml.so.1"

// libraryDirs are where a driver root keeps its libraries, as
// distributions and NVIDIA's driver containers lay them out.
var libraryDirs = []string{
	"usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
	"lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "usr/lib", "lib",
}

// ErrNoLibrary means a driver root holds no NVML library.
var ErrNoLibrary = errors.New("holds no NVML library")

// FindLibrary is the directory, relative to the driver root root (the
// host's "/", or a driver container's such as /run/nvidia/driver), that
// holds NVML's library. A root without one is ErrNoLibrary, naming where
// it looked.
func FindLibrary(root string) (string, error) {
	var tried []string
	for _, dir := range libraryDirs {
		if _, err := os.Stat(filepath.Join(root, dir, Library)); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("driver root %s: %w", root, err)
		}
		tried = append(tried, filepath.Join(dir, Library))
	}
	return "", fmt.Errorf("driver root %s %w (looked for %s)", root, ErrNoLibrary, strings.Join(tried, ", "))
}
