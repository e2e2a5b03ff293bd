package kit

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// NodeLabels reads the labels of the driver's node, for a driver whose
// one DaemonSet serves nodes that differ (each node's profile, device
// count and place in its labels); what names the labels' purpose in the
// error. A driver pod may start before its node routes the API server's
// Service (kube-proxy not synced yet: the connection leaves the node, and
// whatever answers fails TLS or times out): such a failure is retried,
// logged, for up to labelsPatience; an answer of the API server's (no
// such node, forbidden) is not.
func NodeLabels(ctx context.Context, client kubernetes.Interface, node, what string) (map[string]string, error) {
	logger := klog.FromContext(ctx)
	deadline := time.Now().Add(labelsPatience)
	for delay := labelsRetry; ; delay = min(2*delay, 8*labelsRetry) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			return n.Labels, nil
		}
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || time.Now().Add(delay).After(deadline) {
			return nil, fmt.Errorf("reading node %s for its %s labels: %w", node, what, err)
		}
		logger.Info("Reading the node's labels failed; retrying", "node", node, "in", delay, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading node %s for its %s labels: %w (%w)", node, what, ctx.Err(), err)
		case <-time.After(delay):
		}
	}
}

// How NodeLabels retries: first after labelsRetry, then twice as long
// each time (at most eight times as long), for labelsPatience in all.
// Variables for the tests.
var (
	labelsRetry    = 500 * time.Millisecond
	labelsPatience = 2 * time.Minute
)

// LabelSettings are a driver's settings that one DaemonSet over nodes
// that differ reads from each node's labels (the chart's way): the
// labels' names, from flags, and the settings they fill. A label left
// unnamed, or a setting left nil, is not read.
type LabelSettings struct {
	// What names the devices in messages ("GPU", "NIC").
	What string
	// ProfileLabel fills Profile, where the command line left it empty;
	// a node without the label is an error.
	ProfileLabel string
	Profile      *string
	// CountLabel fills Count where the node has it.
	CountLabel string
	Count      *int
	// RackLabel and NVLinkDomainLabel fill Rack and NVLinkDomain where the
	// node has them.
	RackLabel, NVLinkDomainLabel string
	Rack, NVLinkDomain           *string
}

// Reads tells whether any label is to be read.
func (s LabelSettings) Reads() bool {
	return s.ProfileLabel != "" || s.CountLabel != "" || s.RackLabel != "" || s.NVLinkDomainLabel != ""
}

// FromNodeLabels fills the settings from the labels of the driver's node.
func (s LabelSettings) FromNodeLabels(ctx context.Context, client kubernetes.Interface, node string) error {
	if !s.Reads() {
		return nil
	}
	labels, err := NodeLabels(ctx, client, node, s.What)
	if err != nil {
		return err
	}
	for _, l := range []struct {
		label string
		value *string
	}{{s.RackLabel, s.Rack}, {s.NVLinkDomainLabel, s.NVLinkDomain}} {
		if v := labels[l.label]; l.label != "" && l.value != nil && v != "" {
			*l.value = v
		}
	}
	if s.ProfileLabel != "" && s.Profile != nil && *s.Profile == "" {
		if *s.Profile = labels[s.ProfileLabel]; *s.Profile == "" {
			return fmt.Errorf("node %s has no label %s naming its %s profile", node, s.ProfileLabel, s.What)
		}
	}
	if v, ok := labels[s.CountLabel]; ok && s.CountLabel != "" && s.Count != nil {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("node %s label %s=%q is not a number", node, s.CountLabel, v)
		}
		*s.Count = n
	}
	return nil
}

// ListDevices writes the devices the driver's inventory would publish to w, as
// YAML (--list): on the node named, or on "node".
func (o *NodeFlags) ListDevices(ctx context.Context, w io.Writer, inventory func() (Inventory, error)) error {
	if o.NodeName == "" {
		o.NodeName = "node"
	}
	inv, err := inventory()
	if err != nil {
		return err
	}
	return WriteDevices(ctx, inv, w)
}
