package scenarios

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/internal/nodedrivers"
)

// await polls until the step's expectations hold on a settled namespace,
// and returns the last allocation table with its mismatches when the step
// timeout passes first.
func (r *run) await(ctx context.Context, st Step) (StepResult, error) {
	res := StepResult{Name: st.Name}
	var lastErr error
	// A step that holds for a while first reaches its outcome, within
	// the step timeout, then keeps it.
	hold := st.holdsFor()
	var heldSince time.Time
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, r.StepTimeout+hold, true, func(ctx context.Context) (bool, error) {
		snap, err := allocation.Read(ctx, r.Client, r.ns, nodedrivers.Vocabulary)
		if err != nil {
			lastErr = err
			return false, nil
		}
		rows, err := snap.Rows(ctx)
		if err != nil {
			return false, err
		}
		if slices.ContainsFunc(st.Expect, func(e Expectation) bool { return e.DeviceMetadata }) {
			if err := r.readMetadata(ctx, snap, rows); err != nil {
				lastErr = err
				return false, nil
			}
		}
		res.Rows, res.Snapshot = rows, snap
		res.Expectations = CheckEach(st.Expect, Outcomes(rows), r.inv)
		var groupResults []ExpectationResult
		if len(st.ExpectGroups) > 0 {
			groups, err := r.Client.SchedulingV1beta1().PodGroups(r.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				lastErr = err
				return false, nil
			}
			groupResults = CheckGroups(st.ExpectGroups, groups.Items, snap, rows, r.inv)
			res.Expectations = append(res.Expectations, groupResults...)
		}
		if !r.settled(ctx, snap) {
			res.Failures = []string{"the namespace did not settle: pods are still starting, terminating or waiting for the scheduler"}
			return r.held(&res, hold, &heldSince), nil
		}
		res.Failures = append(failuresOf(st.Expect, res.Expectations[:len(st.Expect)]), groupFailuresOf(st.ExpectGroups, groupResults)...)
		return r.held(&res, hold, &heldSince), nil
	})
	if hold > 0 && len(res.Failures) == 0 && (heldSince.IsZero() || time.Since(heldSince) < hold) {
		res.Failures = []string{fmt.Sprintf("the expectations held only from %s ago when the step's time (%s) ran out; they must hold for %s", time.Since(heldSince).Round(100*time.Millisecond), r.StepTimeout+hold, hold)}
	}
	if err != nil && !wait.Interrupted(err) {
		return res, err
	}
	if res.Rows == nil && lastErr != nil {
		return res, lastErr
	}
	return res, nil
}

// held tells whether the step is done with res, its latest look: at once
// when its expectations hold and it need not hold them; else once they
// have held for hold since they first did (heldSince), or as soon as one
// stops holding meanwhile, which then fails the step with what moved.
func (r *run) held(res *StepResult, hold time.Duration, heldSince *time.Time) bool {
	ok := len(res.Failures) == 0
	switch {
	case hold == 0:
		return ok
	case heldSince.IsZero():
		if ok {
			*heldSince = time.Now()
		}
		return false
	case !ok:
		for i, f := range res.Failures {
			res.Failures[i] = fmt.Sprintf("held for %s of the %s it must, then: %s", time.Since(*heldSince).Round(100*time.Millisecond), hold, f)
		}
		return true
	}
	return time.Since(*heldSince) >= hold
}

// readMetadata reads the device metadata files each running pod's
// containers printed into their logs and gives them to the pod's rows.
func (r *run) readMetadata(ctx context.Context, snap *allocation.Snapshot, rows []allocation.Row) error {
	found := map[string][]allocation.MetadataDevice{}
	for _, p := range snap.Pods {
		if p.Status.Phase != v1.PodRunning {
			continue
		}
		for _, c := range p.Spec.Containers {
			log, err := r.Client.CoreV1().Pods(r.ns).GetLogs(p.Name, &v1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
			if err != nil {
				return fmt.Errorf("reading the log of pod %s, container %s: %w", p.Name, c.Name, err)
			}
			devs, err := snap.ParseMetadata(string(log))
			if err != nil {
				return fmt.Errorf("pod %s, container %s: %w", p.Name, c.Name, err)
			}
			found[p.Name] = append(found[p.Name], devs...)
		}
	}
	for i := range rows {
		rows[i].Metadata = found[rows[i].Pod]
	}
	return nil
}

// settled: every pod runs or was found unschedulable, none is
// terminating, the pods an action removed are gone and so are their
// devices (no claim is reserved for one, none that one owns is left: the
// next step's pods must not meet devices a removed pod still holds), and
// every Deployment has all its pods.
func (r *run) settled(ctx context.Context, snap *allocation.Snapshot) bool {
	gone := map[string]bool{}
	for _, name := range r.gone {
		gone[name] = true
		for _, p := range snap.Pods {
			if p.Name == name {
				return false
			}
		}
	}
	for _, c := range snap.Claims {
		if c.Namespace != r.ns {
			continue
		}
		for _, ref := range c.Status.ReservedFor {
			if ref.Resource == "pods" && gone[ref.Name] {
				return false
			}
		}
		for _, o := range c.OwnerReferences {
			if o.Kind == "Pod" && gone[o.Name] {
				return false
			}
		}
	}
	for _, p := range snap.Pods {
		if p.DeletionTimestamp != nil {
			return false
		}
		if p.Status.Phase != v1.PodRunning && !(p.Spec.NodeName == "" && allocation.Unschedulable(&p)) {
			return false
		}
	}
	deployments, err := r.Client.AppsV1().Deployments(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, d := range deployments.Items {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			return false
		}
		n := 0
		for _, p := range snap.Pods {
			if sel.Matches(labels.Set(p.Labels)) {
				n++
			}
		}
		if n != int(ptr.Deref(d.Spec.Replicas, 1)) {
			return false
		}
	}
	return true
}
