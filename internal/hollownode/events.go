package hollownode

import (
	"context"

	v1 "k8s.io/api/core/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	clientset "k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
)

// warningRecorder records the kubelet's Warning events in the API server,
// as a real node does: a claim its driver refused to prepare
// (FailedPrepareDynamicResources) is visible there, and checks pass on it.
// Normal events (pulled, created, started) are dropped: at a hundred nodes
// they would only load the API server. It returns the recorder and the
// function that stops it.
func warningRecorder(ctx context.Context, client clientset.Interface, node string) (record.EventRecorderLogger, func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	r := broadcaster.NewRecorder(legacyscheme.Scheme, v1.EventSource{Component: "kubelet", Host: node})
	return warningsOnly{r}, broadcaster.Shutdown
}

// warningsOnly passes Warning events on and drops the others.
type warningsOnly struct{ record.EventRecorderLogger }

func (w warningsOnly) Event(object apiruntime.Object, eventtype, reason, message string) {
	if eventtype == v1.EventTypeWarning {
		w.EventRecorderLogger.Event(object, eventtype, reason, message)
	}
}

func (w warningsOnly) Eventf(object apiruntime.Object, eventtype, reason, messageFmt string, args ...any) {
	if eventtype == v1.EventTypeWarning {
		w.EventRecorderLogger.Eventf(object, eventtype, reason, messageFmt, args...)
	}
}

func (w warningsOnly) AnnotatedEventf(object apiruntime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	if eventtype == v1.EventTypeWarning {
		w.EventRecorderLogger.AnnotatedEventf(object, annotations, eventtype, reason, messageFmt, args...)
	}
}

func (w warningsOnly) WithLogger(logger klog.Logger) record.EventRecorderLogger {
	return warningsOnly{w.EventRecorderLogger.WithLogger(logger)}
}
