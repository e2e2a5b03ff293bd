package build

import (
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestCrossEnv(t *testing.T) {
	mac := CrossEnv(Platform{"darwin", "arm64"})
	if !slices.Contains(mac, "CGO_ENABLED=0") || slices.ContainsFunc(mac, func(s string) bool { return strings.HasPrefix(s, "CC=") }) {
		t.Errorf("CrossEnv(darwin/arm64) = %v; want no cgo and no C compiler", mac)
	}
	arm := CrossEnv(Platform{"linux", "arm64"})
	if !slices.Contains(arm, "CGO_ENABLED=1") || !slices.Contains(arm, "GOARCH=arm64") {
		t.Errorf("CrossEnv(linux/arm64) = %v; want cgo for NVML", arm)
	}
	if wantCC := runtime.GOARCH != "arm64"; slices.Contains(arm, "CC="+ArmLinuxCC) != wantCC {
		t.Errorf("CrossEnv(linux/arm64) on %s = %v; want the cross C compiler only off arm64", runtime.GOARCH, arm)
	}
}
