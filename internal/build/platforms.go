package build

import "runtime"

// Platform is an operating system and architecture dralab's commands are
// built for.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// CrossPlatforms are the platforms besides the build host's that CI
// checks every command for: Arm servers (GH200 hosts among them)
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
