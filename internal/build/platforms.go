package build

import (
	"debug/elf"
	"debug/macho"
	"errors"
	"fmt"
	"os"
	"runtime"
)

// Platform is an operating system and architecture dralab's commands are
// built for.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// CrossPlatforms are the platforms besides the build host's that CI
// cross-compiles every command for: Arm servers (GH200 hosts among them)
// and the Macs of workshop attendees.
var CrossPlatforms = []Platform{{"linux", "arm64"}, {"darwin", "arm64"}}

// ArmLinuxCC is Debian's C cross-compiler for linux/arm64, which the
// driver's cgo build (NVML) needs there.
const ArmLinuxCC = "aarch64-linux-gnu-gcc"

// CrossEnv is the environment of a build for p on this host: cgo where the
// platform's build needs it (Linux, through a cross C compiler when the
// host's architecture differs), none elsewhere.
func CrossEnv(p Platform) []string {
	env := []string{"GOOS=" + p.OS, "GOARCH=" + p.Arch, "CGO_ENABLED=" + cgo(p.OS)}
	if p.OS == "linux" && p.Arch == "arm64" && runtime.GOARCH != "arm64" {
		env = append(env, "CC="+ArmLinuxCC)
	}
	return env
}

// CheckBinary tells whether the executable at path was built for p,
// reading its ELF or Mach-O header.
func CheckBinary(path string, p Platform) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var format, arch string
	if e, err := elf.NewFile(f); err == nil {
		format = "linux"
		arch = map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[e.Machine]
		if arch == "" {
			arch = e.Machine.String()
		}
	} else if m, err := macho.NewFile(f); err == nil {
		format = "darwin"
		arch = map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[m.Cpu]
		if arch == "" {
			arch = m.Cpu.String()
		}
	} else {
		return fmt.Errorf("%s: %w", path, errors.New("neither an ELF nor a Mach-O executable"))
	}
	if got := (Platform{format, arch}); got != p {
		return fmt.Errorf("%s is a %s executable, not %s", path, got, p)
	}
	return nil
}
