package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/manifest"
)

// kit is what a check works with.
type kit struct {
	*suite
	client kubernetes.Interface
	ns     string
	// rules are the DeviceTaintRules the check created, groups its
	// PodGroups.
	rules, groups []string
	// proven are the values the check's pods proved, with their devices.
	proven []provenDevice
	// quiet caches quietNodes.
	quiet *[]string
	// keptOffChecks are the last askings of keptOff, by pod.
	keptOffMu     sync.Mutex
	keptOffChecks map[string]keptOffCheck
}

// meta names an object of the check's namespace, labelled as the run's.
func (k *kit) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: k.labels()}
}

func (k *kit) createNamespace(ctx context.Context, adminAccess bool) error {
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.ns, Labels: k.labels()}}
	if adminAccess {
		// Only namespaces labelled so may hold claims with admin access.
		ns.Labels["resource.kubernetes.io/admin-access"] = "true"
	}
	return CreateNamespace(ctx, k.client, ns)
}

// cleanup removes what the check created: its DeviceTaintRules first, its
// pods, PodGroups and claims (waiting, so that the next check finds the
// devices free), then its namespace. It works on a context of its own: a check
// that failed, timed out or was cancelled leaves nothing behind.
func (k *kit) cleanup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.m.Timeouts.PodRunning+time.Minute)
	defer cancel()
	errs := []error{deleteEach(ctx, "DeviceTaintRule", k.rules, k.client.ResourceV1().DeviceTaintRules().Delete)}
	var pods, claims []string
	podList, err := k.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	errs = append(errs, err)
	if err == nil {
		for _, p := range podList.Items {
			pods = append(pods, p.Name)
		}
	}
	claimList, err := k.client.ResourceV1().ResourceClaims(k.ns).List(ctx, metav1.ListOptions{})
	errs = append(errs, err)
	if err == nil {
		for _, c := range claimList.Items {
			claims = append(claims, c.Name)
		}
	}
	// A PodGroup goes once its pods have, before the claims, so that no
	// controller makes its claim again.
	errs = append(errs,
		k.remove(ctx, pods, nil),
		deleteEach(ctx, "PodGroup", k.groups, k.client.SchedulingV1beta1().PodGroups(k.ns).Delete),
		k.remove(ctx, nil, claims),
		deleteEach(ctx, "namespace", []string{k.ns}, k.client.CoreV1().Namespaces().Delete))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleanup of %s: %w", k.ns, err)
	}
	return nil
}

// remove deletes pods, waits until they are gone, then deletes claims and
// waits until they are gone too. Pods are deleted gracefully, never
// forced: the kubelet removes a pod only once it has unprepared the pod's
// claims, so that, once the pods are gone, their devices are free on the
// node as well as in the API (a forced deletion frees them in the API
// while the driver still holds them, and the next check's claim is
// refused).
func (k *kit) remove(ctx context.Context, pods, claims []string) error {
	podsAPI, claimsAPI := k.client.CoreV1().Pods(k.ns), k.client.ResourceV1().ResourceClaims(k.ns)
	deletePod := func(ctx context.Context, name string, o metav1.DeleteOptions) error {
		// Not 0, the pods' own termination grace period, which would
		// force the deletion.
		o.GracePeriodSeconds = ptr.To[int64](1)
		return podsAPI.Delete(ctx, name, o)
	}
	if err := deleteEach(ctx, "pod", pods, deletePod); err != nil {
		return err
	}
	if err := k.waitGone(ctx, "pods", pods, func(ctx context.Context, name string) error {
		_, err := podsAPI.Get(ctx, name, metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	if err := deleteEach(ctx, "claim", claims, claimsAPI.Delete); err != nil {
		return err
	}
	return k.waitGone(ctx, "claims", claims, func(ctx context.Context, name string) error {
		_, err := claimsAPI.Get(ctx, name, metav1.GetOptions{})
		return err
	})
}

// waitGone waits until get says NotFound for every name.
func (k *kit) waitGone(ctx context.Context, kind string, names []string, get func(context.Context, string) error) error {
	return poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("%s %v of %s to be deleted", kind, names, k.ns), func(ctx context.Context) (string, bool, error) {
		var (
			left    []string
			lastErr error
		)
		for _, name := range names {
			switch err := get(ctx, name); {
			case apierrors.IsNotFound(err):
			case err != nil:
				left, lastErr = append(left, name), err
			default:
				left = append(left, name)
			}
		}
		return fmt.Sprintf("%v remain", left), len(left) == 0, lastErr
	})
}

// deleteEach deletes the named objects of a kind; one already gone is no
// error.
func deleteEach(ctx context.Context, kind string, names []string, del func(context.Context, string, metav1.DeleteOptions) error) error {
	var errs []error
	for _, name := range names {
		if err := del(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", kind, name, err))
		}
	}
	return errors.Join(errs...)
}

// removeLeftovers deletes what an earlier run left, and nothing else:
// DeviceTaintRules, claims and namespaces labelled
// LabelManagedBy=ManagedBy whose LabelRun is not runID. It waits until the
// namespaces are gone, with the pods and claims in them that hold
// devices. It returns what it deleted.
func removeLeftovers(ctx context.Context, client kubernetes.Interface, runID string, timeout time.Duration) ([]string, error) {
	leftover := metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy + "," + LabelRun + "!=" + runID}
	var removed []string
	rules, err := client.ResourceV1().DeviceTaintRules().List(ctx, leftover)
	// A cluster that does not serve DeviceTaintRules has none left.
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	var names []string
	for _, r := range ptr.Deref(rules, resourceapi.DeviceTaintRuleList{}).Items {
		names = append(names, r.Name)
		removed = append(removed, "DeviceTaintRule "+r.Name)
	}
	if err := deleteEach(ctx, "DeviceTaintRule", names, client.ResourceV1().DeviceTaintRules().Delete); err != nil {
		return removed, err
	}
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, leftover)
	if err != nil {
		return removed, err
	}
	for _, c := range claims.Items {
		if c.DeletionTimestamp != nil {
			continue
		}
		if err := deleteEach(ctx, "claim", []string{c.Name}, client.ResourceV1().ResourceClaims(c.Namespace).Delete); err != nil {
			return removed, err
		}
		removed = append(removed, "claim "+c.Namespace+"/"+c.Name)
	}
	namespaces, err := client.CoreV1().Namespaces().List(ctx, leftover)
	if err != nil {
		return removed, err
	}
	names = nil
	for _, ns := range namespaces.Items {
		if ns.DeletionTimestamp == nil {
			names = append(names, ns.Name)
			removed = append(removed, "namespace "+ns.Name)
		}
	}
	if err := deleteEach(ctx, "namespace", names, client.CoreV1().Namespaces().Delete); err != nil {
		return removed, err
	}
	err = poll(ctx, timeout, "the namespaces of an earlier run to be deleted", func(ctx context.Context) (string, bool, error) {
		namespaces, err := client.CoreV1().Namespaces().List(ctx, leftover)
		if err != nil {
			return "", false, err
		}
		var left []string
		for _, ns := range namespaces.Items {
			left = append(left, ns.Name)
		}
		return fmt.Sprintf("%v remain", left), len(left) == 0, nil
	})
	return removed, err
}

// request asks for one device of the manifest's class.
func (k *kit) request(name string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: k.m.DeviceClass}}
}

func (k *kit) createClaim(ctx context.Context, name string, requests ...resourceapi.DeviceRequest) error {
	return k.createClaimOf(ctx, name, resourceapi.DeviceClaim{Requests: requests})
}

func (k *kit) createClaimOf(ctx context.Context, name string, devices resourceapi.DeviceClaim) error {
	claim := &resourceapi.ResourceClaim{ObjectMeta: k.meta(name), Spec: resourceapi.ResourceClaimSpec{Devices: devices}}
	if _, err := k.client.ResourceV1().ResourceClaims(k.ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("claim %s: %w", name, err)
	}
	return nil
}

// pod is a proof container using the named claims; mutate adjusts it.
func (k *kit) pod(ctx context.Context, name string, claims []string, mutate func(*v1.Pod)) error {
	c := v1.Container{Name: "proof", Image: k.o.Image, ImagePullPolicy: k.o.PullPolicy}
	if p := k.m.Proof.Command; p != nil {
		c.Command = p.Args
	} else {
		c.Command = []string{"sh", "-c", "env; exec sleep 1000000"}
	}
	pod := &v1.Pod{
		ObjectMeta: k.meta(name),
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			RestartPolicy:                 v1.RestartPolicyNever,
			Containers:                    []v1.Container{c},
		},
	}
	// A device that skips NodePrepareResources is never prepared: a pod
	// there could not prove it.
	quiet, err := k.quietNodes(ctx)
	if err != nil {
		return err
	}
	offNodes(pod, quiet)
	for _, cl := range claims {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: cl, ResourceClaimName: ptr.To(cl)})
		pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, v1.ResourceClaim{Name: cl})
	}
	if mutate != nil {
		mutate(pod)
	}
	// What the cluster asks of a pod to run on the driver's nodes, beside
	// where the check places it.
	k.m.ProofPod.Apply(&pod.Spec)
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, k.o.Tolerations...)
	_, err = k.client.CoreV1().Pods(k.ns).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// logSettle is how long the log of a running container must stay the
// same to be all an env proof's container prints: it prints its
// environment at once, then sleeps.
const logSettle = time.Second

// proof waits until the pod runs (or, for a command proof, has run) and
// returns what its container proves: the env variable's value, or the
// command output's match. It fails as soon as the evidence is in: the pod
// failed, or its container's log, final (the container ended) or settled
// (an env proof's), does not prove the device. The error says what the
// pod and its log showed last.
func (k *kit) proof(ctx context.Context, name string) (string, error) {
	return k.proofWith(ctx, name, k.m.Proof)
}

// proofWith is proof with a proof of the manifest's other than its main
// one (a partition's).
func (k *kit) proofWith(ctx context.Context, name string, p manifest.Proof) (string, error) {
	var (
		proven   string
		log      string
		logSince time.Time
	)
	err := poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("pod %s to prove its device", name), func(ctx context.Context) (string, bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		state := podState(pod)
		ended := pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed || containerEnded(pod)
		if pod.Status.Phase != v1.PodRunning && !ended {
			return state, false, k.keptOff(ctx, pod)
		}
		logs, err := k.client.CoreV1().Pods(k.ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctx)
		switch {
		case err != nil && pod.Status.Phase == v1.PodFailed:
			return state, false, settle(fmt.Errorf("pod %s failed: %s; its log: %v", name, state, err))
		case err != nil:
			return state, false, err
		}
		v, err := p.Match(string(logs))
		switch {
		case pod.Status.Phase == v1.PodFailed:
			return state, false, settle(fmt.Errorf("pod %s failed: %s; its log: %s", name, state, proofResult(v, err)))
		case err == nil:
			proven = v
			return state, true, nil
		}
		state += "; its log: " + err.Error()
		if string(logs) != log {
			log, logSince = string(logs), time.Now()
		}
		settled := p.Env != nil && log != "" && time.Since(logSince) >= logSettle
		if ended || settled {
			return state, false, settle(fmt.Errorf("pod %s does not prove its device: %w (pod: %s)", name, err, podState(pod)))
		}
		return state, false, nil
	})
	if err != nil {
		return "", err
	}
	return proven, k.bindProof(ctx, name, p, proven)
}

// containerEnded tells whether a container of the pod has terminated:
// its log is then all it will print.
func containerEnded(pod *v1.Pod) bool {
	return slices.ContainsFunc(pod.Status.ContainerStatuses, func(c v1.ContainerStatus) bool { return c.State.Terminated != nil })
}

func proofResult(v string, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("proves %q", v)
}

// podState says why a pod is where it is: its phase, the conditions that
// do not hold, and its containers' waiting reasons.
func podState(pod *v1.Pod) string {
	s := string(pod.Status.Phase)
	if s == "" {
		s = "no phase yet"
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != v1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf("; %s: %s", c.Type, c.Message)
		}
	}
	for _, c := range pod.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			s += fmt.Sprintf("; container %s waiting: %s %s", c.Name, w.Reason, w.Message)
		}
		if t := c.State.Terminated; t != nil {
			s += fmt.Sprintf("; container %s terminated: exit code %d %s %s", c.Name, t.ExitCode, t.Reason, t.Message)
		}
	}
	return s
}

// claimResults returns the allocation results of a claim, waiting for it
// to be allocated.
func (k *kit) claimResults(ctx context.Context, name string) ([]resourceapi.DeviceRequestAllocationResult, error) {
	var results []resourceapi.DeviceRequestAllocationResult
	err := poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("claim %s to be allocated", name), func(ctx context.Context) (string, bool, error) {
		c, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		if c.Status.Allocation == nil {
			return "not allocated", false, nil
		}
		results = c.Status.Allocation.Devices.Results
		return "", true, nil
	})
	return results, err
}

// oneDevice creates a claim for one device of the class and a pod of the
// same name using it, waits until the pod proves its device, and returns
// the proof, the claim's allocation result and the pod's node.
func (k *kit) oneDevice(ctx context.Context, name string, mutate func(*v1.Pod)) (string, resourceapi.DeviceRequestAllocationResult, string, error) {
	return k.oneDeviceOf(ctx, name, k.request("dev"), mutate)
}

// oneDeviceOf is oneDevice with the claim's request given.
func (k *kit) oneDeviceOf(ctx context.Context, name string, req resourceapi.DeviceRequest, mutate func(*v1.Pod)) (string, resourceapi.DeviceRequestAllocationResult, string, error) {
	var none resourceapi.DeviceRequestAllocationResult
	if err := k.createClaim(ctx, name, req); err != nil {
		return "", none, "", err
	}
	if err := k.pod(ctx, name, []string{name}, mutate); err != nil {
		return "", none, "", err
	}
	v, err := k.proof(ctx, name)
	if err != nil {
		return "", none, "", err
	}
	results, err := k.claimResults(ctx, name)
	if err != nil {
		return "", none, "", err
	}
	if len(results) != 1 || results[0].Driver != k.m.Driver {
		return "", none, "", fmt.Errorf("claim %s from class %s got %v, want one device of driver %s", name, k.m.DeviceClass, results, k.m.Driver)
	}
	pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", none, "", err
	}
	return v, results[0], pod.Spec.NodeName, nil
}
