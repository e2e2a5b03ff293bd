package sanity

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// infoTimeout bounds a GetInfo call: sockets of other plugins share the
// registry, and one that hangs must not stall the search for very long.
const infoTimeout = 10 * time.Second

// plugin is the driver's kubelet plugin as found in the registry.
type plugin struct {
	// socket is the registration socket that named the driver.
	socket string
	info   *registerapi.PluginInfo
}

// dial connects to a unix socket the way the kubelet does: plain gRPC,
// no TLS, the socket's file permissions being the access control.
func dial(path string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", path, err)
	}
	return conn, nil
}

// getInfo calls GetInfo on one registration socket.
func getInfo(ctx context.Context, socket string) (*registerapi.PluginInfo, error) {
	conn, err := dial(socket)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	return registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
}

// findPlugin looks for the driver among the sockets of the registry, as
// the kubelet's plugin watcher does: several drivers, and CSI plugins, may
// be registered there, so the driver is the socket whose GetInfo names it.
// A socket of type DRAPlugin is preferred, but one of another type naming
// the driver is returned too, for the registration check to report.
func (s *session) findPlugin(ctx context.Context) (*plugin, error) {
	dir := s.cfg.RegistrarDir
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, broke("registration", "reading the plugin registry: %v", err)
	}
	var found *plugin
	var others []string
	for _, entry := range entries {
		if entry.Type()&os.ModeSocket == 0 {
			continue
		}
		socket := filepath.Join(dir, entry.Name())
		info, err := getInfo(ctx, socket)
		switch {
		case err != nil:
			others = append(others, fmt.Sprintf("%s (no answer: %v)", entry.Name(), err))
		case info.Name != s.driver:
			others = append(others, fmt.Sprintf("%s (%s %q)", entry.Name(), info.Type, info.Name))
		case info.Type == registerapi.DRAPlugin:
			return &plugin{socket: socket, info: info}, nil
		case found == nil:
			found = &plugin{socket: socket, info: info}
		}
	}
	if found != nil {
		return found, nil
	}
	if len(others) == 0 {
		return nil, broke("registration", "no socket in %s, so the kubelet cannot find driver %q", dir, s.driver)
	}
	return nil, broke("registration", "no socket in %s answers GetInfo with name %q; found %s", dir, s.driver, strings.Join(others, ", "))
}

// pingDRA proves that a DRA endpoint serves the v1 DRAPlugin service: an
// unprepare of no claims has no effect on any driver.
func pingDRA(ctx context.Context, client drapb.DRAPluginClient, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := client.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{})
	return err
}

// unavailable tells a plugin that did not answer from one that answered
// with an error: the first is what a crashed or hung plugin looks like.
func unavailable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// resolveCDI checks that every ID is a qualified CDI name in a spec of the
// CDI directory, reading the directory afresh as a runtime starting a
// container would. rule names the rule a failure breaks; what names the
// IDs in the message, e.g. `returned for claim default/sanity-x`.
func (s *session) resolveCDI(rule, what string, ids []string) error {
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(s.cfg.CDIDir), cdi.WithAutoRefresh(false)) // the error is always nil
	var errs []error
	for _, id := range ids {
		if _, _, _, err := parser.ParseQualifiedName(id); err != nil {
			errs = append(errs, broke(rule, "CDI device %q %s is not a qualified CDI name: %v", id, what, err))
			continue
		}
		if cache.GetDevice(id) != nil {
			continue
		}
		msg := fmt.Sprintf("CDI device %q %s is in no spec under %s", id, what, s.cfg.CDIDir)
		// A spec the runtime cannot load is the likely reason: say so.
		if specErrs := specErrors(cache); specErrs != "" {
			msg += "; unreadable specs: " + specErrs
		}
		errs = append(errs, broke(rule, "%s", msg))
	}
	return errors.Join(errs...)
}

func specErrors(cache *cdi.Cache) string {
	var out []string
	for path, errs := range cache.GetErrors() {
		out = append(out, fmt.Sprintf("%s: %v", path, errors.Join(errs...)))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// cdiIDs returns the CDI device IDs of prepared devices, in order.
func cdiIDs(devices []*drapb.Device) []string {
	var ids []string
	for _, d := range devices {
		ids = append(ids, d.GetCdiDeviceIds()...)
	}
	return ids
}

// describeDevices writes prepared devices in a canonical form, so that two
// answers can be compared whatever order the driver lists them in.
func describeDevices(devices []*drapb.Device) string {
	var out []string
	for _, d := range devices {
		reqs := slices.Sorted(slices.Values(d.GetRequestNames()))
		ids := slices.Sorted(slices.Values(d.GetCdiDeviceIds()))
		share := ""
		if d.ShareId != nil {
			share = " share " + d.GetShareId()
		}
		out = append(out, fmt.Sprintf("%s/%s%s for %v: %v", d.GetPoolName(), d.GetDeviceName(), share, reqs, ids))
	}
	sort.Strings(out)
	return "[" + strings.Join(out, "; ") + "]"
}
