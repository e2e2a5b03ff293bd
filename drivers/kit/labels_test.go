package kit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A driver that starts before its node routes the API server's Service
// gets its labels once the route is there; an answer of the API server's
// (no such node) fails at once, and a route that never comes fails once
// the patience is spent, with the last error.
func TestNodeLabelsRetriesUnreachableServer(t *testing.T) {
	retry, patience := labelsRetry, labelsPatience
	t.Cleanup(func() { labelsRetry, labelsPatience = retry, patience })
	labelsRetry, labelsPatience = time.Millisecond, time.Second
	unreachable := errors.New(`Get "https://10.96.0.1:443/api/v1/nodes/n1": tls: failed to verify certificate: x509: cannot validate certificate for 10.96.0.1 because it doesn't contain any IP SANs`)
	ctx := context.Background()

	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"gpu.dralab.dev/profile": "l4-24gb"}}})
	calls := 0
	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls <= 3 {
			return true, nil, unreachable
		}
		return false, nil, nil
	})
	labels, err := NodeLabels(ctx, client, "n1", "GPU")
	if err != nil || labels["gpu.dralab.dev/profile"] != "l4-24gb" || calls != 4 {
		t.Errorf("after three unreachable tries: %v, %v, %d calls; want the labels at the fourth", labels, err, calls)
	}

	if _, err := NodeLabels(ctx, client, "n2", "GPU"); !apierrors.IsNotFound(err) || calls != 5 {
		t.Errorf("a node the API server does not have: %v after %d calls; want NotFound at once", err, calls-4)
	}

	never := fake.NewClientset()
	never.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, unreachable })
	start := time.Now()
	_, err = NodeLabels(ctx, never, "n1", "GPU")
	if err == nil || !strings.Contains(err.Error(), "x509") || !strings.Contains(err.Error(), "reading node n1 for its GPU labels") || time.Since(start) < labelsPatience/2 {
		t.Errorf("a route that never comes: %v after %s", err, time.Since(start))
	}
}
