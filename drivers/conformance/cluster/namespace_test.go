package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestCreateNamespaceWaitsForServiceAccount: CreateNamespace returns only
// once the namespace's default ServiceAccount exists, made here after the
// namespace as the controller manager makes it; with no account it ends
// with its context, naming the namespace.
func TestCreateNamespaceWaitsForServiceAccount(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	go func() {
		time.Sleep(300 * time.Millisecond)
		sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "ns"}}
		if _, err := client.CoreV1().ServiceAccounts("ns").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Error(err)
		}
	}()
	if err := CreateNamespace(ctx, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ServiceAccounts("ns").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("CreateNamespace returned before the default ServiceAccount existed: %v", err)
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := CreateNamespace(short, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lonely"}})
	if err == nil || !strings.Contains(err.Error(), "namespace lonely has no default ServiceAccount") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("CreateNamespace without a ServiceAccount: got %v, want the namespace named and the context's deadline", err)
	}
}
