package status

import "errors"

// Conditions a user can act on, which every backend reports wrapped in
// these errors and lab exports as its own.
var (
	// ErrConfigMismatch: a lab of that name runs with another configuration.
	ErrConfigMismatch = errors.New("a lab with this name is running with a different configuration")
	// ErrPortInUse: the configured API server port is taken.
	ErrPortInUse = errors.New("port in use")
	// ErrHostNotReady: the host lacks what a real node needs.
	ErrHostNotReady = errors.New("this host cannot run a real node")
	// ErrPathTooLong: a node's plugin socket would not fit a unix socket
	// path.
	ErrPathTooLong = errors.New("the nodes' plugin sockets would not fit a unix socket path")
	// ErrNoEngine: no container engine that kind can use is available.
	ErrNoEngine = errors.New("kind needs a working Docker or Podman engine")
	// ErrDegraded: a process of a running lab has died.
	ErrDegraded = errors.New("the lab is degraded")
)
