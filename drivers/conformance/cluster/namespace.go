package cluster

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// ServiceAccountTimeout bounds CreateNamespace's wait for the namespace's
// default ServiceAccount.
const ServiceAccountTimeout = time.Minute

// CreateNamespace creates ns and waits until it has its default
// ServiceAccount. The controller manager makes that account after the
// namespace exists, and until it does the API server refuses every pod
// that names no other ("error looking up service account"): a pod created
// at once after its namespace fails on a busy cluster, or on a lab that
// has just come up.
func CreateNamespace(ctx context.Context, client kubernetes.Interface, ns *v1.Namespace) error {
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	return WaitForServiceAccount(ctx, client, ns.Name)
}

// WaitForServiceAccount waits until namespace ns has its default
// ServiceAccount (see CreateNamespace).
func WaitForServiceAccount(ctx context.Context, client kubernetes.Interface, ns string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, ServiceAccountTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return true, nil
		}
		if !apierrors.IsNotFound(err) {
			last = err
		}
		return false, nil
	})
	if err != nil {
		if last != nil {
			return fmt.Errorf("namespace %s has no default ServiceAccount after %v (is the controller manager running?): %w; last error: %w", ns, ServiceAccountTimeout, err, last)
		}
		return fmt.Errorf("namespace %s has no default ServiceAccount after %v (is the controller manager running?): %w", ns, ServiceAccountTimeout, err)
	}
	return nil
}
