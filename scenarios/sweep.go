package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// What a run makes carries LabelManagedBy and LabelRun (its namespace's
// name); its namespace says until when the run is alive
// (AnnotationAliveUntil), which the run renews while it goes. A run that
// was interrupted (its process killed, its machine gone) leaves them: the
// next run removes the namespaces whose run is no longer alive, and the
// cluster-scoped objects of those runs, and says what it removed. What
// another run still alive made, and what no run made, it leaves alone.
const (
	// LabelRun names the run (its namespace) that made an object.
	LabelRun = "dralab.dev/scenario-run"
	// AnnotationAliveUntil is when a run's namespace stops being its
	// live run's, unless the run renews it (RFC 3339).
	AnnotationAliveUntil = "dralab.dev/alive-until"
)

// A run renews its namespace's AnnotationAliveUntil every aliveRenew to
// aliveFor ahead.
var (
	aliveFor   = 2 * time.Minute
	aliveRenew = 30 * time.Second
)

// aliveUntil is the annotation's value for a run alive from now on.
func aliveUntil(now time.Time) string { return now.Add(aliveFor).UTC().Format(time.RFC3339) }

// keepAlive renews the run's namespace's AnnotationAliveUntil until ctx
// ends.
func (r *run) keepAlive(ctx context.Context) {
	tick := time.NewTicker(aliveRenew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationAliveUntil, aliveUntil(now))
			if _, err := r.Client.CoreV1().Namespaces().Patch(ctx, r.ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Renewing the scenario run's namespace", "namespace", r.ns)
			}
		}
	}
}

// Sweep removes what interrupted runs left: the namespaces of runs no
// longer alive, with what they hold, and the DeviceTaintRules and
// DeviceClasses those runs made (or, where no run is alive at all, any a
// run made). It returns what it removed, as kind/name.
func (r *Runner) Sweep(ctx context.Context) ([]string, error) {
	managed := metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + fieldManager}
	namespaces, err := r.Client.CoreV1().Namespaces().List(ctx, managed)
	if err != nil {
		return nil, fmt.Errorf("listing the namespaces of scenario runs: %w", err)
	}
	now := time.Now()
	alive := map[string]bool{}
	var stale []string
	for _, ns := range namespaces.Items {
		switch {
		case runAlive(&ns, now):
			alive[ns.Name] = true
		case ns.Status.Phase != v1.NamespaceTerminating: // not going already
			stale = append(stale, ns.Name)
		}
	}
	removed, err := deleteNamed(ctx, "Namespace", stale, r.Client.CoreV1().Namespaces().Delete)
	errs := []error{err}
	// left tells whether a cluster-scoped object is a run's that is gone.
	left := func(labels map[string]string) bool {
		if run, ok := labels[LabelRun]; ok {
			return !alive[run]
		}
		return len(alive) == 0
	}
	var ruleNames, classNames []string
	rules, err := r.Client.ResourceV1().DeviceTaintRules().List(ctx, managed)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		errs = append(errs, fmt.Errorf("listing the DeviceTaintRules of scenario runs: %w", err))
	default:
		for _, rule := range rules.Items {
			if left(rule.Labels) {
				ruleNames = append(ruleNames, rule.Name)
			}
		}
	}
	classes, err := r.Client.ResourceV1().DeviceClasses().List(ctx, managed)
	if err != nil {
		errs = append(errs, fmt.Errorf("listing the DeviceClasses of scenario runs: %w", err))
	} else {
		for _, c := range classes.Items {
			if left(c.Labels) {
				classNames = append(classNames, c.Name)
			}
		}
	}
	gone, err := deleteNamed(ctx, "DeviceTaintRule", ruleNames, r.Client.ResourceV1().DeviceTaintRules().Delete)
	removed, errs = append(removed, gone...), append(errs, err)
	gone, err = deleteNamed(ctx, "DeviceClass", classNames, r.Client.ResourceV1().DeviceClasses().Delete)
	removed, errs = append(removed, gone...), append(errs, err)
	slices.Sort(removed)
	if len(removed) > 0 {
		klog.FromContext(ctx).Info("Removed what interrupted scenario runs left", "removed", removed)
	}
	return removed, errors.Join(errs...)
}

// deleteNamed deletes the objects of a kind named, one already gone
// counted as deleted; it returns those deleted, as kind/name, and what
// could not be.
func deleteNamed(ctx context.Context, kind string, names []string, del func(context.Context, string, metav1.DeleteOptions) error) ([]string, error) {
	var deleted []string
	var errs []error
	for _, name := range names {
		if err := del(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", kind, name, err))
			continue
		}
		deleted = append(deleted, kind+"/"+name)
	}
	return deleted, errors.Join(errs...)
}

// runAlive tells whether a run's namespace is its live run's: its
// AnnotationAliveUntil is ahead of now.
func runAlive(ns *v1.Namespace, now time.Time) bool {
	until, err := time.Parse(time.RFC3339, ns.Annotations[AnnotationAliveUntil])
	return err == nil && until.After(now)
}

// runLabels are the labels of a run's namespace: the scenario's own, and
// the run's.
func runLabels(s *Scenario, ns string) map[string]string {
	labels := maps.Clone(s.NamespaceLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy], labels[LabelRun] = fieldManager, ns
	return labels
}
