package build

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestCheckBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	host := Platform{runtime.GOOS, runtime.GOARCH}
	if err := CheckBinary(self, host); err != nil {
		t.Errorf("CheckBinary(the test binary, %s) = %v", host, err)
	}
	for _, p := range append([]Platform{{"windows", "amd64"}}, CrossPlatforms...) {
		if p == host {
			continue
		}
		err := CheckBinary(self, p)
		if err == nil || !strings.Contains(err.Error(), "not "+p.String()) {
			t.Errorf("CheckBinary(a %s binary, %s) = %v; want it to say it is not one", host, p, err)
		}
	}
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckBinary(text, host); err == nil || !strings.Contains(err.Error(), "neither an ELF nor a Mach-O") {
		t.Errorf("CheckBinary(a script) = %v; want it refused", err)
	}
}

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
