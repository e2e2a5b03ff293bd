package hollownode

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// The hollow kubelet's Warning events go on, whichever way they are
// recorded; Normal ones do not.
func TestWarningsOnly(t *testing.T) {
	fake := record.NewFakeRecorder(10)
	r := warningsOnly{fake}
	pod := &v1.Pod{}
	r.Event(pod, v1.EventTypeNormal, "Pulled", "image pulled")
	r.Eventf(pod, v1.EventTypeNormal, "Started", "container %s started", "proof")
	r.Event(pod, v1.EventTypeWarning, "FailedMount", "no volume")
	r.Eventf(pod, v1.EventTypeWarning, "FailedPrepareDynamicResources", "Failed to prepare dynamic resources: %v", "bad interval")
	r.AnnotatedEventf(pod, nil, v1.EventTypeNormal, "Created", "created")
	r.AnnotatedEventf(pod, nil, v1.EventTypeWarning, "Evicted", "evicted")
	r.WithLogger(klog.Background()).Eventf(pod, v1.EventTypeNormal, "Killing", "stopping")
	r.WithLogger(klog.Background()).Eventf(pod, v1.EventTypeWarning, "BackOff", "back-off")
	close(fake.Events)
	var got []string
	for e := range fake.Events {
		got = append(got, e)
	}
	want := []string{
		"Warning FailedMount no volume",
		"Warning FailedPrepareDynamicResources Failed to prepare dynamic resources: bad interval",
		"Warning Evicted evicted",
		"Warning BackOff back-off",
	}
	if len(got) != len(want) {
		t.Fatalf("recorded %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %q, want %q", i, got[i], want[i])
		}
	}
}
