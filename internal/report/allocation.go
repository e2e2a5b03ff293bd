// Package report explains allocations: for each pod, which claim request
// got which device (and, for a prioritized list, which subrequest was
// chosen), the device's tier and node, and for a pod that waits, why.
package report

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/dralab/dralab/drivers/gpu"
)

// Row is one allocated device of one pod's claim, or one pod without an
// allocation.
type Row struct {
	Namespace string
	Pod       string
	Phase     v1.PodPhase
	Node      string
	Claim     string
	// Request is the claim's request; Subrequest the prioritized-list
	// alternative chosen for it, if any.
	Request    string
	Subrequest string
	Driver     string
	Pool       string
	Device     string
	// Product and Tier describe a GPU of dralab's driver.
	Product     string
	Tier        string
	AdminAccess bool
	// Reason says why a pod waits, when it does.
	Reason string
}

// DeviceRef names a device.
func (r Row) DeviceRef() string {
	if r.Device == "" {
		return ""
	}
	return r.Driver + "/" + r.Pool + "/" + r.Device
}

// Snapshot is what the report reads from the API.
type Snapshot struct {
	Pods   []v1.Pod
	Claims map[string]*resourceapi.ResourceClaim
	Slices []resourceapi.ResourceSlice
}

// Read lists a namespace's pods and claims and the cluster's slices.
func Read(ctx context.Context, client kubernetes.Interface, namespace string) (*Snapshot, error) {
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	claims, err := client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("listing claims: %w", err)
	}
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing slices: %w", err)
	}
	s := &Snapshot{Pods: pods.Items, Claims: map[string]*resourceapi.ResourceClaim{}, Slices: slices.Items}
	if claims != nil {
		for i := range claims.Items {
			s.Claims[claims.Items[i].Name] = &claims.Items[i]
		}
	}
	sort.Slice(s.Pods, func(i, j int) bool {
		a, b := s.Pods[i].CreationTimestamp, s.Pods[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return s.Pods[i].Name < s.Pods[j].Name
	})
	return s, nil
}

// Allocations reads a namespace and returns its allocation table.
func Allocations(ctx context.Context, client kubernetes.Interface, namespace string) ([]Row, error) {
	s, err := Read(ctx, client, namespace)
	if err != nil {
		return nil, err
	}
	return s.Rows(ctx)
}

// Rows builds the allocation table, pods in creation order.
func (s *Snapshot) Rows(ctx context.Context) ([]Row, error) {
	var rows []Row
	for i := range s.Pods {
		pod := &s.Pods[i]
		base := Row{Namespace: pod.Namespace, Pod: pod.Name, Phase: pod.Status.Phase, Node: pod.Spec.NodeName}
		claimRows := 0
		for _, pc := range pod.Spec.ResourceClaims {
			name := claimName(pod, pc)
			claim := s.Claims[name]
			if claim == nil || claim.Status.Allocation == nil {
				continue
			}
			for _, r := range claim.Status.Allocation.Devices.Results {
				row := base
				row.Claim = claim.Name
				row.Request, row.Subrequest, _ = strings.Cut(r.Request, "/")
				row.Driver, row.Pool, row.Device = r.Driver, r.Pool, r.Device
				row.AdminAccess = r.AdminAccess != nil && *r.AdminAccess
				if dev := s.device(r.Driver, r.Pool, r.Device); dev != nil {
					row.Product = stringAttr(dev, "productName")
					tier, err := Tier(ctx, r.Driver, dev)
					if err != nil {
						return nil, err
					}
					row.Tier = tier
				}
				rows = append(rows, row)
				claimRows++
			}
		}
		if claimRows == 0 {
			if pod.Spec.NodeName == "" {
				base.Reason = schedulingMessage(pod)
			}
			rows = append(rows, base)
		}
	}
	return rows, nil
}

// Tier is the tier of a GPU of dralab's driver, "" for other devices.
func Tier(ctx context.Context, driver string, dev *resourceapi.Device) (string, error) {
	return gpu.TierOf(ctx, cel.Device{Driver: driver, Attributes: dev.Attributes, Capacity: dev.Capacity})
}

func claimName(pod *v1.Pod, pc v1.PodResourceClaim) string {
	if pc.ResourceClaimName != nil {
		return *pc.ResourceClaimName
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == pc.Name && st.ResourceClaimName != nil {
			return *st.ResourceClaimName
		}
	}
	return ""
}

func (s *Snapshot) device(driver, pool, name string) *resourceapi.Device {
	for i := range s.Slices {
		sl := &s.Slices[i]
		if sl.Spec.Driver != driver || sl.Spec.Pool.Name != pool {
			continue
		}
		for j := range sl.Spec.Devices {
			if sl.Spec.Devices[j].Name == name {
				return &sl.Spec.Devices[j]
			}
		}
	}
	return nil
}

func stringAttr(dev *resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := dev.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// schedulingMessage is the scheduler's own word on an unscheduled pod.
func schedulingMessage(pod *v1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}

// WriteTable prints rows as an aligned table.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCLAIM\tREQUEST → CHOSEN\tDEVICE\tTIER\tNODE\tSTATUS")
	for _, r := range rows {
		req := r.Request
		if r.Subrequest != "" {
			req += " → " + r.Subrequest
		}
		status := string(r.Phase)
		if r.Reason != "" {
			status += ": " + r.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Pod, dash(r.Claim), dash(req), dash(r.DeviceRef()), dash(r.Tier), dash(r.Node), status)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
