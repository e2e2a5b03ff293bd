package scalebench

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podWatch follows the bench's pods through an informer and tells when
// pods get bound.
type podWatch struct {
	mu    sync.Mutex
	bound map[string]time.Time
	// taints counts each virtual node's taints; once every node has been
	// seen untainted (new nodes start with not-ready until the node
	// lifecycle controller sees them Ready) the watch is armed, and
	// tainted is the first node seen with a taint after that.
	taints  map[string]int
	armed   bool
	tainted string
	changed chan struct{}
	lister  cache.Indexer
}

func watchPods(ctx context.Context, client kubernetes.Interface) (*podWatch, func(), error) {
	w := &podWatch{bound: map[string]time.Time{}, taints: map[string]int{}, changed: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(Namespace))
	inf := factory.Core().V1().Pods().Informer()
	observe := func(obj any) {
		pod, ok := obj.(*v1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return
		}
		w.mu.Lock()
		if _, seen := w.bound[pod.Name]; !seen {
			w.bound[pod.Name] = time.Now()
		}
		w.mu.Unlock()
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		cancel()
		return nil, nil, err
	}
	w.lister = inf.GetIndexer()
	// Virtual nodes are never tainted unless their leases fall behind.
	nodeFactory := informers.NewSharedInformerFactory(client, 0)
	nodes := nodeFactory.Core().V1().Nodes().Informer()
	seeTaint := func(obj any) {
		n, ok := obj.(*v1.Node)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.taints[n.Name] = len(n.Spec.Taints)
		if len(n.Spec.Taints) > 0 && w.armed && w.tainted == "" {
			w.tainted = fmt.Sprintf("%s (%s:%s)", n.Name, n.Spec.Taints[0].Key, n.Spec.Taints[0].Effect)
		}
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seeTaint, UpdateFunc: func(_, obj any) { seeTaint(obj) }}); err != nil {
		cancel()
		return nil, nil, err
	}
	factory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, nodes.HasSynced) {
		cancel()
		return nil, nil, errors.New("the pod informer did not sync")
	}
	return w, func() { cancel(); factory.Shutdown(); nodeFactory.Shutdown() }, nil
}

// stallTimeout bounds how long a batch may go without a pod being bound.
const stallTimeout = 2 * time.Minute

// createAndWait creates the pods and waits until every one is bound. It
// returns the time from the first creation to the last binding.
func (o Options) createAndWait(ctx context.Context, client kubernetes.Interface, w *podWatch, pods []*v1.Pod) (time.Duration, error) {
	start := time.Now()
	// created delivers the creators' error, then is nil.
	created := make(chan error, 1)
	go func() {
		created <- parallel(ctx, len(pods), o.Workers, func(ctx context.Context, i int) error {
			if _, err := client.CoreV1().Pods(Namespace).Create(ctx, pods[i], metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating pod %s: %w", pods[i].Name, err)
			}
			return nil
		})
	}()
	lastProgress, lastCount := time.Now(), -1
	for {
		count, last := w.boundOf(pods)
		if count == len(pods) {
			if created != nil {
				if err := <-created; err != nil {
					return 0, err
				}
			}
			return last.Sub(start), nil
		}
		if count != lastCount {
			lastProgress, lastCount = time.Now(), count
		}
		if time.Since(lastProgress) > stallTimeout {
			return 0, fmt.Errorf("%d of %d pods bound, none more in %s: %s", count, len(pods), stallTimeout, w.pendingReason(pods))
		}
		select {
		case err := <-created:
			if err != nil {
				return 0, err
			}
			created = nil
		case <-w.changed:
		case <-time.After(time.Second):
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
}

// untainted waits until all n virtual nodes are untainted, then arms the
// taint watch.
func (w *podWatch) untainted(ctx context.Context, n int) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		clean := 0
		for _, t := range w.taints {
			if t == 0 {
				clean++
			}
		}
		w.armed = clean == n
		return w.armed, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the controller manager to untaint %d new virtual nodes: %w", n, err)
	}
	return nil
}

// taint names the first virtual node seen tainted, "" for none.
func (w *podWatch) taint() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tainted
}

// boundOf counts the pods bound so far and the time the last of them was.
func (w *podWatch) boundOf(pods []*v1.Pod) (int, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	n := 0
	for _, p := range pods {
		if t, ok := w.bound[p.Name]; ok {
			n++
			if t.After(last) {
				last = t
			}
		}
	}
	return n, last
}

// pendingReason says why the first few unbound pods are pending, from
// their PodScheduled condition.
func (w *podWatch) pendingReason(pods []*v1.Pod) string {
	var reasons []string
	for _, p := range pods {
		obj, ok, _ := w.lister.GetByKey(Namespace + "/" + p.Name)
		if !ok {
			continue
		}
		pod := obj.(*v1.Pod)
		if pod.Spec.NodeName != "" {
			continue
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
				reasons = append(reasons, fmt.Sprintf("pod %s: %s", pod.Name, c.Message))
			}
		}
		if len(reasons) == 3 {
			break
		}
	}
	if len(reasons) == 0 {
		return "no pod has a scheduling condition yet"
	}
	sort.Strings(reasons)
	return strings.Join(reasons, "; ")
}
