package kit

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Readier is a running driver that can say whether the kubelet can use it.
type Readier interface {
	// Ready returns nil once the driver serves, else why it does not yet.
	Ready(ctx context.Context) error
}

// Health answers /healthz: 200 once the driver it watches is ready, 503
// with the reason before, and before there is a driver to watch, so that it
// can listen before the driver starts.
type Health struct {
	mu     sync.Mutex
	driver Readier
}

// Watch makes h answer for r.
func (h *Health) Watch(r Readier) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.driver = r
}

func (h *Health) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h.mu.Lock()
	r := h.driver
	h.mu.Unlock()
	err := errors.New("starting")
	if r != nil {
		err = r.Ready(req.Context())
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Serve serves handler on l until ctx ends or stop is called; stop waits
// for the server to close. The caller listens, so that it can report a
// taken address as its own before the driver starts.
func Serve(ctx context.Context, l net.Listener, handler http.Handler) (stop func()) {
	logger := klog.FromContext(ctx).WithValues("address", l.Addr().String())
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(logWriter{logger}, "", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP endpoint failed")
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		<-ctx.Done()
		shutdown, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancelShutdown()
		_ = srv.Shutdown(shutdown)
	}()
	return func() {
		cancel()
		<-done
	}
}

// logWriter turns the HTTP server's own complaints (a bad request, a
// failed TLS handshake) into log entries.
type logWriter struct{ logger klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.logger.V(1).Info("HTTP server", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

// Ready implements Readier: the kubelet has registered the plugin, and the
// node's ResourceSlices, with every device of the inventory, are in the API.
func (d *Driver) Ready(ctx context.Context) error {
	if !d.registered.Load() {
		return errors.New("not registered with the kubelet yet")
	}
	if d.published.Load() {
		return nil
	}
	missing, err := d.unpublished(ctx)
	if err != nil {
		return fmt.Errorf("reading the node's ResourceSlices: %w", err)
	}
	if len(missing) > 0 {
		sortDeviceNames(missing)
		what := "devices"
		if len(d.counterSets) > 0 {
			what = "devices and counter sets"
		}
		return fmt.Errorf("ResourceSlices not published yet: %d of %d %s missing (%s)", len(missing), d.ownDevices()+len(d.counterSets), what, strings.Join(missing, ", "))
	}
	d.published.Store(true)
	return nil
}

// ownDevices counts the devices of the node's own pool.
func (d *Driver) ownDevices() int {
	n := 0
	for _, dev := range d.devices {
		if dev.Pool == "" {
			n++
		}
	}
	return n
}

// unpublished returns the inventory's devices not in the node's pool in
// the API, listed with the field selector the slice controller uses.
func (d *Driver) unpublished(ctx context.Context) ([]string, error) {
	sel := fields.Set{
		resourceapi.ResourceSliceSelectorDriver:   d.opts.DriverName,
		resourceapi.ResourceSliceSelectorNodeName: d.opts.NodeName,
	}
	slices, err := d.opts.KubeClient.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	published, publishedSets := map[string]bool{}, map[string]bool{}
	for _, s := range slices.Items {
		// Checked again: not every client filters by fields.
		if s.Spec.Driver == d.opts.DriverName && s.Spec.Pool.Name == d.opts.NodeName {
			for _, dev := range s.Spec.Devices {
				published[dev.Name] = true
			}
			for _, cs := range s.Spec.SharedCounters {
				publishedSets[cs.Name] = true
			}
		}
	}
	var missing []string
	for name, dev := range d.devices {
		// Another pool's devices are its publisher's to publish.
		if dev.Pool == "" && !published[name] {
			missing = append(missing, name)
		}
	}
	// Without its counters a device cannot be allocated: the pool is
	// incomplete until they are there too.
	for name := range d.counterSets {
		if !publishedSets[name] {
			missing = append(missing, "counter set "+name)
		}
	}
	return missing, nil
}

// watchRegistration is a gRPC interceptor of the plugin's servers that
// keeps the kubelet's answer to the registration.
func (d *Driver) watchRegistration(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if status, ok := req.(*registerapi.RegistrationStatus); ok {
		d.registered.Store(status.PluginRegistered)
	}
	return resp, err
}

// Ready implements Readier: the kubelet's device manager has accepted the
// plugin's registration.
func (p *DevicePlugin) Ready(context.Context) error {
	if !p.registered.Load() {
		return errors.New("not registered with the kubelet's device manager yet")
	}
	return nil
}
