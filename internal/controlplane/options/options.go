// Package options are what starts a lab's control plane
// (internal/controlplane): its listener, files and settings. They are a
// package of their own so that the lab process's supervisor
// (internal/labserver), which fills them in, builds without Kubernetes'
// own packages: its tests run under the race detector (test:race), which
// would otherwise compile the API server, scheduler and controller manager
// with -race too.
package options

import "net"

// Options configures a control plane. Every path is absolute.
type Options struct {
	// Listener is the API server's listener, already bound to loopback.
	Listener net.Listener
	// EtcdDir is etcd's data directory; EtcdLog its log file.
	EtcdDir string
	EtcdLog string
	// EtcdSocket is the unix socket etcd serves its clients on; it must
	// lie in a directory only the lab's user may enter, since etcd asks
	// its clients for no credentials.
	EtcdSocket string
	// PKI holds the certificates the lab issued (internal/labserver).
	PKI PKIFiles
	// SchedulerKubeconfig and ControllerManagerKubeconfig are the
	// components' own credentials.
	SchedulerKubeconfig         string
	ControllerManagerKubeconfig string
	// SchedulerConfig is the scheduler's configuration file.
	SchedulerConfig string
	// ControllerManagerQPS is the controller manager's client QPS and
	// burst; ClaimWorkers its resource claim controller's workers.
	ControllerManagerQPS int32
	ClaimWorkers         int32
	// AdminKubeconfig is used to wait for the API to be ready.
	AdminKubeconfig string
	// FeatureGates is passed as --feature-gates, e.g. "A=true,B=false".
	FeatureGates string
	// RuntimeConfig is added to the API server's --runtime-config, after
	// controlplane.ServedResourceVersions (so that it may switch those off too).
	RuntimeConfig string
	// AuditPolicy and AuditLog, when set, make the API server write an
	// audit log (JSON lines) of the requests the policy selects.
	AuditPolicy string
	AuditLog    string
}

// PKIFiles are the certificate and key files the control plane serves and
// authenticates with.
type PKIFiles struct {
	CACert, CAKey                       string
	APIServerCert, APIServerKey         string
	KubeletClientCert, KubeletClientKey string
	// ServiceAccountKey signs and verifies service account tokens.
	ServiceAccountKey string
}
