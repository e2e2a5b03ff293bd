// Package podresources reads a kubelet's podresources API (the socket
// monitoring agents read to map devices to pods) and lays out its DRA
// devices: one row per device of a claim a container uses.
package podresources

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	client "github.com/dralab/dralab/drivers/conformance/podresources"
)

// Row is one device a container got through a claim, as the kubelet
// reports it; a container without DRA devices is one row with only its
// pod and name.
type Row struct {
	Namespace, Pod, Container string
	// Claim is namespace/name; Driver, Pool and Device name the device;
	// Share is its share ID for consumable capacity ("" for a whole
	// device); CDI its CDI device IDs.
	Claim, Driver, Pool, Device, Share string
	CDI                                []string
}

// List calls List on the kubelet's podresources socket and returns the
// rows of every container of every pod, sorted.
func List(ctx context.Context, socket string) ([]Row, error) {
	resp, err := ListResponse(ctx, socket)
	if err != nil {
		return nil, err
	}
	return Rows(resp), nil
}

// ListResponse calls List on the kubelet's podresources socket.
func ListResponse(ctx context.Context, socket string) (*podresourcesapi.ListPodResourcesResponse, error) {
	return client.List(ctx, socket)
}

// Rows lays out a List response.
func Rows(resp *podresourcesapi.ListPodResourcesResponse) []Row {
	var out []Row
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			base := Row{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName()}
			n := len(out)
			for _, dr := range c.GetDynamicResources() {
				for _, cr := range dr.GetClaimResources() {
					r := base
					r.Claim = dr.GetClaimNamespace() + "/" + dr.GetClaimName()
					r.Driver, r.Pool, r.Device, r.Share = cr.GetDriverName(), cr.GetPoolName(), cr.GetDeviceName(), cr.GetShareId()
					for _, id := range cr.GetCdiDevices() {
						r.CDI = append(r.CDI, id.GetName())
					}
					out = append(out, r)
				}
			}
			if len(out) == n {
				out = append(out, base)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container),
			cmp.Compare(a.Claim, b.Claim), cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Device, b.Device))
	})
	return out
}

// Write prints rows as a table, "-" where a container has no DRA device.
func Write(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tCONTAINER\tCLAIM\tDRIVER\tPOOL\tDEVICE\tSHARE\tCDI DEVICES")
	dash := func(s string) string { return cmp.Or(s, "-") }
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Pod, r.Container,
			dash(r.Claim), dash(r.Driver), dash(r.Pool), dash(r.Device), dash(r.Share), dash(strings.Join(r.CDI, ",")))
	}
	return tw.Flush()
}
