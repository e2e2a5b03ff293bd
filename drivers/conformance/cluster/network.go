package cluster

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/manifest"
)

// networkData: a pod given a device of the class runs; the driver writes
// the device's network data into the claim's status (an interface name,
// addresses that parse as CIDRs, a hardware address that parses as one),
// and the container proves the very interface that data names.
func (s *suite) networkData(ctx context.Context, logf logFunc, k *kit) error {
	_, got, _, err := k.oneDevice(ctx, "net", nil)
	if err != nil {
		return err
	}
	entry, err := k.statusEntry(ctx, "net", got, func(d *resourceapi.AllocatedDeviceStatus) (string, bool) {
		return "has no networkData", d.NetworkData != nil
	})
	if err != nil {
		return err
	}
	data := entry.NetworkData
	if data.InterfaceName == "" {
		return fmt.Errorf("the network data of %s/%s names no interface: %+v", got.Pool, got.Device, *data)
	}
	for _, ip := range data.IPs {
		if _, err := netip.ParsePrefix(ip); err != nil {
			return fmt.Errorf("the network data of %s/%s has address %q, not an address with its prefix length (CIDR): %v", got.Pool, got.Device, ip, err)
		}
	}
	if hw := data.HardwareAddress; hw != "" {
		if _, err := net.ParseMAC(hw); err != nil {
			return fmt.Errorf("the network data of %s/%s has hardware address %q: %v", got.Pool, got.Device, hw, err)
		}
	}
	logs, err := k.client.CoreV1().Pods(k.ns).GetLogs("net", &v1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return err
	}
	seen, err := k.m.NetworkData.Interface.Match(string(logs))
	if err != nil {
		return fmt.Errorf("the container of pod net, given %s/%s, does not show its interface: %w", got.Pool, got.Device, err)
	}
	if seen != data.InterfaceName {
		return fmt.Errorf("the container of pod net sees interface %q, but the claim's network data for %s/%s names %q", seen, got.Pool, got.Device, data.InterfaceName)
	}
	logf("claim net's status gives %s/%s interface %s, addresses %v, hardware address %q; the container sees %s", got.Pool, got.Device, data.InterfaceName, data.IPs, data.HardwareAddress, seen)
	return nil
}

// skipsPrepare tells whether a slice's devices skip NodePrepareResources.
func skipsPrepare(s resourceapi.ResourceSlice) bool {
	return slices.ContainsFunc(s.Spec.SkipNodeOperations, func(op resourceapi.SkipNodeOperation) bool {
		return op == resourceapi.SkipNodeOperationAll || op == resourceapi.SkipNodeOperationNodePrepareResources
	})
}

// quietNodes are the nodes where the driver publishes a pool whose
// devices skip NodePrepareResources: a container given one is never
// prepared, so it proves nothing, and the checks that prove devices keep
// their pods off these nodes. The optional-node-operations check uses
// them.
func (k *kit) quietNodes(ctx context.Context) ([]string, error) {
	if k.quiet != nil {
		return *k.quiet, nil
	}
	list, err := k.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + k.m.Driver})
	if err != nil {
		return nil, err
	}
	nodes := []string{}
	for _, s := range list.Items {
		if n := ptr.Deref(s.Spec.NodeName, ""); s.Spec.Driver == k.m.Driver && n != "" && skipsPrepare(s) && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	k.quiet = &nodes
	return nodes, nil
}

// optionalNodeOperations: on a node where every pool of the driver skips
// NodePrepareResources, a pod given a device of the class runs; its
// allocation carries the skip, copied from the slice, and its container,
// never prepared, does not prove the device. Where another node's devices
// are prepared, a pod there proves its device in the same check: the
// class is the same, the skip is what differs.
func (s *suite) optionalNodeOperations(ctx context.Context, logf logFunc, k *kit) error {
	list, err := k.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + k.m.Driver})
	if err != nil {
		return err
	}
	skipping, prepared := map[string]bool{}, map[string]bool{}
	for _, sl := range list.Items {
		if n := ptr.Deref(sl.Spec.NodeName, ""); sl.Spec.Driver == k.m.Driver && n != "" {
			if skipsPrepare(sl) {
				skipping[n] = true
			} else {
				prepared[n] = true
			}
		}
	}
	var node string
	for _, n := range slices.Sorted(maps.Keys(skipping)) {
		if prepared[n] {
			continue
		}
		devs, err := nodeDevices(ctx, k.client, k.m.Driver, n)
		if err != nil {
			return err
		}
		if devs, err = classDevices(ctx, k.client, k.m.DeviceClass, devs); err != nil {
			return err
		}
		if len(devs) > 0 {
			node = n
			break
		}
	}
	if node == "" {
		return skipCheck{fmt.Sprintf("no node publishes devices of class %s only in pools with spec.skipNodeOperations naming NodePrepareResources (or *): the check needs one (is the DRAOptionalNodeOperations gate on?)", k.m.DeviceClass)}
	}
	if err := k.createClaim(ctx, "quiet", k.request("dev")); err != nil {
		return err
	}
	if err := k.pod(ctx, "quiet", []string{"quiet"}, onNodes([]string{node})); err != nil {
		return err
	}
	results, err := k.claimResults(ctx, "quiet")
	if err != nil {
		return err
	}
	if len(results) != 1 || results[0].Driver != k.m.Driver {
		return fmt.Errorf("claim quiet got %v, want one device of driver %s", results, k.m.Driver)
	}
	got := results[0]
	if !slices.ContainsFunc(got.SkipNodeOperations, func(op resourceapi.SkipNodeOperation) bool {
		return op == resourceapi.SkipNodeOperationAll || op == resourceapi.SkipNodeOperationNodePrepareResources
	}) {
		return fmt.Errorf("claim quiet got %s/%s of node %s, whose pool skips NodePrepareResources, but its allocation says skipNodeOperations %v: the scheduler did not copy the slice's", got.Pool, got.Device, node, got.SkipNodeOperations)
	}
	log, err := k.unprepared(ctx, "quiet")
	if err != nil {
		return fmt.Errorf("%s/%s, whose allocation skips NodePrepareResources: %w", got.Pool, got.Device, err)
	}
	if k.m.Enabled(manifest.DRAResourceClaimDeviceStatus) {
		c, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, "quiet", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(c.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool { return d.Driver == k.m.Driver }); i >= 0 {
			return fmt.Errorf("claim quiet's status has the driver's entry for %s/%s: the driver prepared a claim whose allocation skips NodePrepareResources", c.Status.Devices[i].Pool, c.Status.Devices[i].Device)
		}
	}
	logf("pod quiet runs on node %s with %s/%s, its allocation skipping %v, and its container shows no device (%s)", node, got.Pool, got.Device, got.SkipNodeOperations, log)
	if len(prepared) == 0 {
		return nil
	}
	v, other, otherNode, err := k.oneDevice(ctx, "prepared", nil)
	if err != nil {
		return fmt.Errorf("a device of class %s on a node whose pools are prepared: %w", k.m.DeviceClass, err)
	}
	logf("pod prepared, on node %s, proves %s/%s: %q", otherNode, other.Pool, other.Device, v)
	return nil
}

// unprepared waits until the pod's container has started and printed
// what it will, and fails if its output proves a device: a container
// whose claim was never prepared has nothing to prove. It returns what the
// proof found instead.
func (k *kit) unprepared(ctx context.Context, name string) (string, error) {
	var (
		found    string
		log      string
		logSince time.Time
	)
	err := poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("pod %s to run and print its environment", name), func(ctx context.Context) (string, bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		state := podState(pod)
		// Running: the kubelet started its container (and, for a proof
		// command, it may have ended).
		if pod.Status.Phase != v1.PodRunning && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed && !containerEnded(pod) {
			return state, false, k.keptOff(ctx, pod)
		}
		logs, err := k.client.CoreV1().Pods(k.ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return state, false, err
		}
		if v, err := k.m.Proof.Match(string(logs)); err == nil {
			return state, false, settle(fmt.Errorf("pod %s proves %q: its container was given the device, so the driver prepared it", name, v))
		} else {
			found = err.Error()
		}
		if string(logs) != log {
			log, logSince = string(logs), time.Now()
		}
		if containerEnded(pod) || (log != "" && time.Since(logSince) >= logSettle) {
			return state, true, nil
		}
		return state + "; its log is still changing", false, nil
	})
	return strings.TrimSpace(found), err
}
