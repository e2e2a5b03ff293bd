package embedded

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/status"
)

func checkPortFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%w: the lab's apiServerPort %d on 127.0.0.1 is taken by another program (%v); choose another port, or 0 for a free one", status.ErrPortInUse, port, err)
	}
	return l.Close()
}

// logTail returns the last n lines of a log file, indented, for error messages.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log at " + path + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "last lines of " + path + ":\n    " + strings.Join(lines, "\n    ")
}

// maxSocketPath is the longest path a unix socket address holds: the
// system's sun_path less its terminating NUL (107 bytes on Linux, 103 on
// macOS).
const maxSocketPath = len(unix.RawSockaddrUnix{}.Path) - 1

// podUIDLength is the length of a pod UID, which the kubelet plugin helper
// puts in its DRA socket's name when a driver supports rolling updates.
const podUIDLength = len("00000000-0000-0000-0000-000000000000")

// checkSocketPaths refuses a lab whose deepest sockets would not fit: the
// driver's registration socket and its DRA socket, named with a pod UID
// as the kubelet plugin helper does for rolling updates
// (<plugins>/<driver>/dra-<uid>.sock). A driver whose socket does not fit
// exits at every start, and the lab would wait for its devices in vain.
func checkSocketPaths(dir labstate.Dir, cfg *config.Config) error {
	driver := gpu.DriverName
	if cfg.Driver != nil {
		driver = cfg.Driver.Name
	}
	for _, n := range cfg.Nodes {
		nd := dir.Node(n.Name)
		for _, sock := range []string{
			filepath.Join(nd.PluginsRegistry(), driver+"-reg.sock"),
			filepath.Join(nd.Plugins(), driver, "dra-"+strings.Repeat("u", podUIDLength)+".sock"),
		} {
			if len(sock) > maxSocketPath {
				return fmt.Errorf("%w: node %s's %s is %d bytes, over the %d a unix socket path may have; the kubelet's directory is already a short link (%s), so use a shorter driver name or TMPDIR",
					status.ErrPathTooLong, n.Name, sock, len(sock), maxSocketPath, nd.KubeletRoot())
			}
		}
	}
	return nil
}
