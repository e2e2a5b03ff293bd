package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/internal/drametrics"
	"github.com/dralab/dralab/internal/nodedrivers"
)

// Server serves the live dashboard of a cluster: read-only (it lists and
// watches, never writes), on a loopback address, behind a token in the
// URL, like a notebook server's.
type Server struct {
	Client kubernetes.Interface
	Title  string
	// Token is what every request must carry (?token=); NewToken makes one.
	Token string
	// Debounce gathers a burst of changes into one update.
	Debounce time.Duration
	// Metrics, if set, reads the cluster's DRA metrics for the page's
	// metrics panel (/metrics-panel): the kubelets', the scheduler's and
	// the drivers', as lab:metrics prints them.
	Metrics func(context.Context) (*drametrics.Snapshot, error)

	mu      sync.Mutex
	subs    map[chan string]struct{}
	changed chan struct{}
	// caches are the informers' listers once they have synced: pages are
	// built from them, not from lists on the API server.
	caches atomic.Pointer[caches]
}

type caches struct {
	pods    corelisters.PodLister
	nodes   corelisters.NodeLister
	claims  resourcelisters.ResourceClaimLister
	slices  resourcelisters.ResourceSliceLister
	classes resourcelisters.DeviceClassLister
	rules   resourcelisters.DeviceTaintRuleLister
}

// snapshot is the cluster as the informers last saw it.
func (c *caches) snapshot() (*allocation.Snapshot, error) {
	everything := labels.Everything()
	pods, err := c.pods.List(everything)
	if err != nil {
		return nil, err
	}
	nodes, err := c.nodes.List(everything)
	if err != nil {
		return nil, err
	}
	claims, err := c.claims.List(everything)
	if err != nil {
		return nil, err
	}
	slices, err := c.slices.List(everything)
	if err != nil {
		return nil, err
	}
	classes, err := c.classes.List(everything)
	if err != nil {
		return nil, err
	}
	rules, err := c.rules.List(everything)
	if err != nil {
		return nil, err
	}
	return allocation.NewSnapshot(nodedrivers.Vocabulary, metav1.NamespaceAll, values(pods), values(claims), values(slices), values(classes), values(rules), values(nodes)), nil
}

// values copies cached objects into a slice of values; the report reads
// them and never writes.
func values[T any](ptrs []*T) []T {
	out := make([]T, len(ptrs))
	for i, p := range ptrs {
		out[i] = *p
	}
	return out
}

// Chromium is the browser the page is tested in: Debian's, which
// go run mage.go deps:browser installs.
const Chromium = "/usr/bin/chromium"

// NewToken is a random token of 128 bits.
func NewToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Listen serves the dashboard on a free loopback port until ctx ends, and
// returns its URL, token included.
func (s *Server) Listen(ctx context.Context) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(l); err != nil && err != http.ErrServerClosed {
			klog.FromContext(ctx).Error(err, "Dashboard server stopped")
		}
	}()
	go s.Watch(ctx)
	return fmt.Sprintf("http://%s/?token=%s", l.Addr(), url.QueryEscape(s.Token)), nil
}

// Serve serves the live dashboard of the cluster of a kubeconfig, with a
// new token, until ctx ends, and returns its URL. metrics, if not nil,
// reads the cluster's DRA metrics for the page's panel.
func Serve(ctx context.Context, kubeconfig, title string, metrics func(context.Context) (*drametrics.Snapshot, error)) (string, error) {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", err
	}
	// No client timeout: the informers watch.
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return "", err
	}
	token, err := NewToken()
	if err != nil {
		return "", err
	}
	s := &Server{Client: client, Title: title, Token: token, Metrics: metrics}
	return s.Listen(ctx)
}

// Handler serves the page (/), its view (/view) and its events (/events).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("GET /view", s.view)
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /metrics-panel", s.metricsPanel)
	return s.authorized(mux)
}

// authorized answers 401 and nothing else without the token.
func (s *Server) authorized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.URL.Query().Get("token")
		if s.Token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.Token)) != 1 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, "The dashboard's URL carries a token: go run mage.go lab:dashboard prints it.")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) build(ctx context.Context) (*Page, error) {
	var snap *allocation.Snapshot
	var err error
	if c := s.caches.Load(); c != nil {
		// PodGroups from the API server, only where a pod joins one: the
		// Workload API is off by default, so no informer waits on it.
		if snap, err = c.snapshot(); err == nil {
			err = snap.ReadPodGroups(ctx, s.Client, metav1.NamespaceAll)
		}
	} else {
		// Before the informers have synced, from the API server.
		snap, err = allocation.Read(ctx, s.Client, metav1.NamespaceAll, nodedrivers.Vocabulary)
	}
	if err != nil {
		return nil, err
	}
	return Build(ctx, s.Title, snap)
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	p, err := s.build(r.Context())
	if err != nil {
		http.Error(w, "reading the cluster: "+err.Error(), http.StatusBadGateway)
		return
	}
	q := r.URL.Query()
	o := Options{Live: true, EventsURL: "events?token=" + url.QueryEscape(s.Token), Large: q.Get("large") == "1"}
	if s.Metrics != nil {
		o.MetricsURL = "metrics-panel?token=" + url.QueryEscape(s.Token)
	}
	q.Set("large", "1")
	o.LargeURL = "?" + q.Encode()
	q.Del("large")
	o.NormalURL = "?" + q.Encode()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := Render(w, p, o); err != nil {
		klog.FromContext(r.Context()).Error(err, "Rendering the dashboard")
	}
}

func (s *Server) view(w http.ResponseWriter, r *http.Request) {
	p, err := s.build(r.Context())
	if err != nil {
		http.Error(w, "reading the cluster: "+err.Error(), http.StatusBadGateway)
		return
	}
	v, err := RenderView(p)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(v))
}

// metricsPanel reads the cluster's DRA metrics and writes the panel.
func (s *Server) metricsPanel(w http.ResponseWriter, r *http.Request) {
	if s.Metrics == nil {
		http.NotFound(w, r)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	snap, err := s.Metrics(ctx)
	if err != nil {
		http.Error(w, "reading the metrics: "+err.Error(), http.StatusBadGateway)
		return
	}
	var b bytes.Buffer
	if err := RenderMetrics(&b, snap); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// events streams the view, as server-sent events, whenever the cluster
// changes.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch := s.subscribe()
	defer s.unsubscribe(ch)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			_, _ = fmt.Fprint(w, ": keepalive\n\n")
		case view := <-ch:
			for _, line := range strings.Split(view, "\n") {
				_, _ = fmt.Fprintf(w, "data: %s\n", line)
			}
			_, _ = fmt.Fprint(w, "\n")
		}
		flusher.Flush()
	}
}

func (s *Server) subscribe() chan string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		s.subs = map[chan string]struct{}{}
	}
	ch := make(chan string, 1)
	s.subs[ch] = struct{}{}
	return ch
}

func (s *Server) unsubscribe(ch chan string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs, ch)
}

// Watch follows the cluster through informers until ctx ends, and sends
// every subscriber the view after each burst of changes.
func (s *Server) Watch(ctx context.Context) {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	if s.changed == nil {
		s.changed = make(chan struct{}, 1)
	}
	changed := s.changed
	s.mu.Unlock()
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	f := informers.NewSharedInformerFactory(s.Client, 0)
	c := &caches{
		pods: f.Core().V1().Pods().Lister(), nodes: f.Core().V1().Nodes().Lister(),
		claims: f.Resource().V1().ResourceClaims().Lister(), slices: f.Resource().V1().ResourceSlices().Lister(),
		classes: f.Resource().V1().DeviceClasses().Lister(), rules: f.Resource().V1().DeviceTaintRules().Lister(),
	}
	for _, inf := range []cache.SharedIndexInformer{
		f.Core().V1().Pods().Informer(), f.Core().V1().Nodes().Informer(),
		f.Resource().V1().ResourceClaims().Informer(), f.Resource().V1().ResourceSlices().Informer(),
		f.Resource().V1().DeviceClasses().Informer(), f.Resource().V1().DeviceTaintRules().Informer(),
	} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			logger.Error(err, "Watching the cluster")
		}
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	go func() {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				logger.V(1).Info("Dashboard cache not synced; pages are read from the API server", "type", typ)
				return
			}
		}
		s.caches.Store(c)
	}()
	debounce := s.Debounce
	if debounce == 0 {
		debounce = 100 * time.Millisecond
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(debounce):
		}
		s.mu.Lock()
		n := len(s.subs)
		s.mu.Unlock()
		if n == 0 {
			continue
		}
		p, err := s.build(ctx)
		if err != nil {
			logger.V(1).Info("Reading the cluster for the dashboard", "err", err)
			continue
		}
		view, err := RenderView(p)
		if err != nil {
			logger.Error(err, "Rendering the dashboard")
			continue
		}
		s.mu.Lock()
		for ch := range s.subs {
			select {
			case <-ch:
			default:
			}
			ch <- view
		}
		s.mu.Unlock()
	}
}
