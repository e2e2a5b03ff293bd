// Package kittest gives driver tests the kubelet's side of the APIs a
// driver registers with.
package kittest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DeviceManager starts the kubelet's device manager on dir until the test
// ends and delivers each registration it accepted. As the kubelet's does,
// it first removes every socket in dir (a plugin's too, and the
// kubelet.sock of a device manager started before it: calling it again is
// a kubelet restart), and it accepts a registration only when it can
// reach the plugin at the endpoint named.
func DeviceManager(t testing.TB, dir string) <-chan *pluginapi.RegisterRequest {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	// A restarted device manager's socket has the same path: the one it
	// replaced must not remove it when it stops.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	m := &deviceManager{dir: dir, got: make(chan *pluginapi.RegisterRequest, 8)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, m)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return m.got
}

type deviceManager struct {
	pluginapi.UnimplementedRegistrationServer
	dir string
	got chan *pluginapi.RegisterRequest
}

func (m *deviceManager) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(m.dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true)); err != nil {
		return nil, fmt.Errorf("connecting to the device plugin at %s: %w", req.Endpoint, err)
	}
	m.got <- req
	return &pluginapi.Empty{}, nil
}
