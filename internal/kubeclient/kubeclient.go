// Package kubeclient makes the clients dralab's own processes use to reach
// a lab's API server.
package kubeclient

import (
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// New is a client of a lab's API server, with a short timeout so that a
// lab that does not answer is reported, not waited for.
func New(kubeconfig string) (*kubernetes.Clientset, error) {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("lab kubeconfig: %w", err)
	}
	restConfig.Timeout = 5 * time.Second
	// client-go's default, 5 requests a second with bursts of 10, is
	// meant for controllers of a shared cluster. The lab's own few clients
	// make their bursts at its start (the drivers' access and tokens, the
	// readiness polls of Up, two requests each 100 ms) and waited on that
	// limiter for about a second of a lab's start.
	restConfig.QPS, restConfig.Burst = 50, 100
	return kubernetes.NewForConfig(restConfig)
}
