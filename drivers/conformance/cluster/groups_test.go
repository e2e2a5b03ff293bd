package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dralab/dralab/drivers/conformance/results"
)

// A cluster that does not serve PodGroups cannot verify group claims: the
// check says so, naming the gates, and creates nothing; one that serves
// them is told apart by discovery.
func TestGroupClaimNotVerifiedWithoutPodGroups(t *testing.T) {
	f, k := newFakeCluster(t, prepareAnyway)
	err := k.groupClaim(context.Background(), t.Logf, k)
	var skip skipCheck
	if !errors.As(err, &skip) || !strings.Contains(skip.reason, "GenericWorkload") || !strings.Contains(skip.reason, "DRAWorkloadResourceClaims") {
		t.Fatalf("got %v, want the check not verified, naming the gates", err)
	}
	if status, msg := k.verdict("group claim", err); status != results.Failed || !strings.Contains(msg, "podgroups.scheduling.k8s.io/v1beta1") {
		t.Errorf("verdict %s: %s; want failed, as not verified", status, msg)
	}
	templates, err := f.client.ResourceV1().ResourceClaimTemplates(k.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(templates.Items) != 0 || len(k.groups) != 0 {
		t.Errorf("created %d templates and groups %v before finding the API absent (%v)", len(templates.Items), k.groups, err)
	}

	f.client.Resources = []*metav1.APIResourceList{{GroupVersion: "scheduling.k8s.io/v1beta1", APIResources: []metav1.APIResource{{Name: "workloads"}}}}
	if ok, err := servesPodGroups(f.client); ok || err != nil {
		t.Errorf("workloads alone: serves PodGroups %v, %v", ok, err)
	}
	f.client.Resources[0].APIResources = append(f.client.Resources[0].APIResources, metav1.APIResource{Name: "podgroups"})
	if ok, err := servesPodGroups(f.client); !ok || err != nil {
		t.Errorf("podgroups served: %v, %v", ok, err)
	}
}
