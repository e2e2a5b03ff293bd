package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// The lock: a Lease that the run holding it renews, so that runs on one
// cluster take turns, one feature at a time. A feature allocates devices
// the cluster has free and counts what is left: two runs' features at
// once would take each other's devices. And while a run holds the lock,
// every other run is between features, with nothing in the cluster: what
// another run's label marks is what an interrupted run left.
const (
	// LockNamespace and LockName are the Lease's namespace and name.
	LockNamespace = "default"
	LockName      = "dralab-conformance"

	lockDuration = 30 * time.Second
	lockRenew    = 20 * time.Second
	lockRetry    = 2 * time.Second
)

// errLockLost is the cause of a feature's context when the run could not
// renew the lock in time: another run may have taken it.
var errLockLost = errors.New("the run lost its lock on the cluster (the Lease " + LockNamespace + "/" + LockName + " was not renewed in time): another run may have run at the same time")

// lock waits until the run holds the cluster's lock, and returns a
// context that is cancelled if the run loses it, and the function that
// releases it (and deletes the Lease if no other run waits for it).
func (s *suite) lock(ctx context.Context, client kubernetes.Interface, logf logFunc) (context.Context, func(), error) {
	// leaderelection's own progress lines are its business, not the
	// run's: they go to the logger at a verbosity a run does not show.
	quiet := klog.NewContext(ctx, klog.FromContext(ctx).V(2))
	held, cancel := context.WithCancelCause(quiet)
	acquired, done := make(chan struct{}), make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: LockNamespace, Name: LockName},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: s.o.RunID},
			Labels:     s.labels(),
		},
		LeaseDuration:   lockDuration,
		RenewDeadline:   lockRenew,
		RetryPeriod:     lockRetry,
		ReleaseOnCancel: true,
		Name:            LockName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(acquired) },
			OnStoppedLeading: func() { cancel(errLockLost) },
			OnNewLeader: func(id string) {
				if id != s.o.RunID {
					logf("waiting for conformance run %s, which holds the lock %s/%s, to end its feature", id, LockNamespace, LockName)
				}
			},
		},
	})
	if err != nil {
		cancel(nil)
		return nil, nil, err
	}
	go func() {
		defer close(done)
		elector.Run(held)
	}()
	select {
	case <-acquired:
	case <-done:
		cancel(nil)
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("waiting for the lock %s/%s: %w", LockNamespace, LockName, err)
		}
		return nil, nil, fmt.Errorf("the lock %s/%s could not be taken", LockNamespace, LockName)
	}
	release := func() {
		cancel(nil)
		<-done
		s.deleteLock(context.WithoutCancel(ctx), client)
	}
	return held, release, nil
}

// deleteLock deletes the released Lease, unless another run has taken it
// since (its resourceVersion then differs).
func (s *suite) deleteLock(ctx context.Context, client kubernetes.Interface) {
	leases := client.CoordinationV1().Leases(LockNamespace)
	l, err := leases.Get(ctx, LockName, metav1.GetOptions{})
	if err != nil || l.Labels[LabelManagedBy] != ManagedBy || (l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "") {
		return
	}
	err = leases.Delete(ctx, LockName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).V(2).Info("Deleting the released lock", "lease", LockNamespace+"/"+LockName, "err", err)
	}
}
