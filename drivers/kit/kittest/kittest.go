// Package kittest gives driver tests the kubelet's side of the APIs a
// driver registers with.
package kittest

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DeviceManager serves the kubelet's device-plugin registration on
// dir/kubelet.sock until the test ends, and delivers each registration.
func DeviceManager(t testing.TB, dir string) <-chan *pluginapi.RegisterRequest {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	m := &deviceManager{got: make(chan *pluginapi.RegisterRequest, 8)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, m)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return m.got
}

type deviceManager struct {
	pluginapi.UnimplementedRegistrationServer
	got chan *pluginapi.RegisterRequest
}

func (m *deviceManager) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	m.got <- req
	return &pluginapi.Empty{}, nil
}
