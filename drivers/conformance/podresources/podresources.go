// Package podresources calls a kubelet's podresources API: List on its
// socket, /var/lib/kubelet/pod-resources/kubelet.sock on a node.
package podresources

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where a kubelet serves its podresources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// List calls List on the kubelet's podresources socket, within 10 s.
func List(ctx context.Context, socket string) (*podresourcesapi.ListPodResourcesResponse, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("podresources socket %s: %w", socket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("podresources List on %s: %w", socket, err)
	}
	return resp, nil
}
