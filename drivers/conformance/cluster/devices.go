package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// device is a published device with its pool.
type device struct {
	driver, pool string
	dev          resourceapi.Device
}

// freeDevices lists the driver's devices the allocator could give now
// (devices.State.Free), on any node.
func freeDevices(ctx context.Context, client kubernetes.Interface, driver string) ([]device, error) {
	st, err := devices.Read(ctx, client, driver)
	if err != nil {
		return nil, err
	}
	return fromDevices(st.Free(driver, "")), nil
}

func fromDevices(ds []devices.Device) []device {
	out := make([]device, 0, len(ds))
	for _, d := range ds {
		out = append(out, device{driver: d.Driver, pool: d.Pool, dev: d.Device})
	}
	return out
}

// matching counts the devices a class selects.
func matching(ctx context.Context, client kubernetes.Interface, className string, devs []device) (int, error) {
	selected, err := classDevices(ctx, client, className, devs)
	return len(selected), err
}

// classDevices returns the devices a class selects, evaluating its CEL
// selectors with the allocator's own library.
func classDevices(ctx context.Context, client kubernetes.Interface, className string, devs []device) ([]device, error) {
	class, err := client.ResourceV1().DeviceClasses().Get(ctx, className, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("DeviceClass %s does not exist", className)
	} else if err != nil {
		return nil, err
	}
	var expressions []string
	for _, sel := range class.Spec.Selectors {
		if sel.CEL != nil {
			expressions = append(expressions, sel.CEL.Expression)
		}
	}
	selectors, err := devices.CompileSelectors(expressions...)
	if err != nil {
		return nil, fmt.Errorf("DeviceClass %s: %w", className, err)
	}
	out, err := selectedBy(ctx, selectors, devs)
	if err != nil {
		return nil, fmt.Errorf("DeviceClass %s: %w", className, err)
	}
	return out, nil
}

// selectedBy returns the devices every selector selects. A selector that
// fails on a device (a CEL runtime error, such as an attribute the device
// lacks read without has()) is an error naming the device: Kubernetes
// 1.37's allocator gives up the whole claim there rather than skip the
// device, so no count may treat it as "not selected".
func selectedBy(ctx context.Context, selectors devices.Selectors, devs []device) ([]device, error) {
	var out []device
	for _, d := range devs {
		ok, err := selectors.Match(ctx, devices.Input(d.driver, &d.dev))
		if err != nil {
			return nil, fmt.Errorf("a selector fails on device %s/%s/%s, and the allocator refuses every claim that meets it there: %w", d.driver, d.pool, d.dev.Name, err)
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// claimLimit is the most devices one claim may be allocated
// (resource.k8s.io's AllocationResultsMaxSize): a claim for every device
// of a bigger node fails allocation ("exceeds the claim limit").
const claimLimit = resourceapi.AllocationResultsMaxSize

// everyDeviceWith returns a request for every device of the manifest's
// class on node, the device of result with among them. Where the node has more than one claim may hold, the
// request's CEL selector narrows them, by attributes with's device has, to
// a group of at most claimLimit that still holds it: CEL cannot name a
// device. A node whose devices' attributes cannot be narrowed so is a
// skipCheck, saying why.
func (k *kit) everyDeviceWith(ctx context.Context, name, node string, with resourceapi.DeviceRequestAllocationResult) (resourceapi.DeviceRequest, error) {
	req := k.request(name)
	req.Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	onNode, err := nodeDevices(ctx, k.client, k.m.Driver, node)
	if err != nil {
		return req, err
	}
	devs, err := classDevices(ctx, k.client, k.m.DeviceClass, onNode)
	if err != nil {
		return req, err
	}
	if len(devs) <= claimLimit {
		return req, nil
	}
	i := slices.IndexFunc(devs, func(d device) bool {
		return d.driver == with.Driver && d.pool == with.Pool && d.dev.Name == with.Device
	})
	if i < 0 {
		return req, fmt.Errorf("device %s/%s/%s is not among the %d devices of class %s published for node %s", with.Driver, with.Pool, with.Device, len(devs), k.m.DeviceClass, node)
	}
	expr, group := narrow(devs, devs[i])
	if group > claimLimit {
		return req, skipCheck{fmt.Sprintf("node %s has %d devices of class %s, more than a claim may hold (%d), and no attributes of %s/%s narrow them to a group of at most %d that holds it: a claim cannot name it",
			node, len(devs), k.m.DeviceClass, claimLimit, with.Pool, with.Device, claimLimit)}
	}
	// The allocator's CEL library must agree with narrow: the claim gets
	// exactly this group or is refused.
	selectors, err := devices.CompileSelectors(expr)
	if err != nil {
		return req, fmt.Errorf("selector %s: %w", expr, err)
	}
	sel, err := selectedBy(ctx, selectors, devs)
	if err != nil {
		return req, fmt.Errorf("selector %s: %w", expr, err)
	}
	if n := len(sel); n != group {
		return req, fmt.Errorf("selector %s selects %d devices of node %s, want %d", expr, n, node, group)
	}
	req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}
	return req, nil
}

// narrow returns a CEL expression over attributes d has, equal to d's, that
// selects a group of at most claimLimit of devs holding d, as large as it
// can, and the group's size; more than claimLimit when d's attributes do
// not narrow devs that far. Each step takes the attribute that leaves the
// largest group within the limit, or else the smallest group.
func narrow(devs []device, d device) (string, int) {
	type clause struct {
		expr string
		same func(device) bool
	}
	var clauses []clause
	for _, name := range slices.Sorted(maps.Keys(d.dev.Attributes)) {
		if expr, same, ok := sameAttribute(d, name); ok {
			clauses = append(clauses, clause{expr: expr, same: same})
		}
	}
	group := devs
	var exprs []string
	for len(group) > claimLimit {
		best, bestGroup := -1, []device(nil)
		for i, c := range clauses {
			next := slices.DeleteFunc(slices.Clone(group), func(o device) bool { return !c.same(o) })
			if len(next) == len(group) {
				continue
			}
			better := best < 0 ||
				len(next) <= claimLimit && (len(bestGroup) > claimLimit || len(next) > len(bestGroup)) ||
				len(next) > claimLimit && len(bestGroup) > claimLimit && len(next) < len(bestGroup)
			if better {
				best, bestGroup = i, next
			}
		}
		if best < 0 {
			break
		}
		group = bestGroup
		exprs = append(exprs, clauses[best].expr)
		clauses = slices.Delete(clauses, best, best+1)
	}
	return strings.Join(exprs, " && "), len(group)
}

// sameAttribute returns a CEL expression selecting the devices whose
// attribute name equals d's, and the same test in Go; false for an
// attribute with no plain equality (versions, lists).
func sameAttribute(d device, name resourceapi.QualifiedName) (string, func(device) bool, bool) {
	domain, id := qualify(d.driver, name)
	lit, ok := celLiteral(d.dev.Attributes[name])
	if !ok {
		return "", nil, false
	}
	// "in" first: a device without the attribute is then not selected,
	// where reading it would be a CEL error that fails the whole
	// allocation.
	attrs := fmt.Sprintf("device.attributes[%s]", quoteCEL(domain))
	expr := fmt.Sprintf("(%s in %s && %s[%s] == %s)", quoteCEL(id), attrs, attrs, quoteCEL(id), lit)
	return expr, func(o device) bool { v, ok := attribute(o, domain, id); return ok && literalOf(v) == lit }, true
}

// qualify splits an attribute's name into its domain, the driver's for a
// name without one, as CEL sees it, and its ID.
func qualify(driver string, name resourceapi.QualifiedName) (domain, id string) {
	if domain, id, ok := strings.Cut(string(name), "/"); ok {
		return domain, id
	}
	return driver, string(name)
}

// attribute finds a device's attribute by domain and ID, however the
// driver spelled its name.
func attribute(d device, domain, id string) (resourceapi.DeviceAttribute, bool) {
	for name, v := range d.dev.Attributes {
		if dom, i := qualify(d.driver, name); dom == domain && i == id {
			return v, true
		}
	}
	return resourceapi.DeviceAttribute{}, false
}

// celLiteral writes an attribute's value as a CEL literal; versions and
// lists are left out (no plain equality).
func celLiteral(a resourceapi.DeviceAttribute) (string, bool) {
	switch {
	case a.StringValue != nil:
		return quoteCEL(*a.StringValue), true
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10), true
	case a.BoolValue != nil:
		return strconv.FormatBool(*a.BoolValue), true
	}
	return "", false
}

func literalOf(a resourceapi.DeviceAttribute) string {
	lit, _ := celLiteral(a)
	return lit
}

// quoteCEL writes a CEL string literal: JSON's escapes (\", \\, \uXXXX)
// are CEL's too.
func quoteCEL(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// nodeDevices lists the driver's devices node reaches, from the newest
// generation of each pool, those the allocator considers.
func nodeDevices(ctx context.Context, client kubernetes.Interface, driver, node string) ([]device, error) {
	st, err := nodeState(ctx, client, driver, node)
	if err != nil {
		return nil, err
	}
	return fromDevices(st.Published(driver, node)), nil
}

// nodeSlices lists the driver's ResourceSlices with devices node reaches,
// of the newest generation of each pool.
func nodeSlices(ctx context.Context, client kubernetes.Interface, driver, node string) ([]resourceapi.ResourceSlice, error) {
	st, err := nodeState(ctx, client, driver, node)
	if err != nil {
		return nil, err
	}
	return st.Current(driver, node), nil
}

// nodeState holds the driver's slices and the cluster's nodes, so that a
// node's devices are every device it reaches: its own slices', and those
// a node selector or allNodes places there; no claim.
func nodeState(ctx context.Context, client kubernetes.Interface, driver, node string) (*devices.State, error) {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driver})
	if err != nil {
		return nil, err
	}
	st := &devices.State{Slices: list.Items}
	if err := st.ReadNodes(ctx, client); err != nil {
		return nil, err
	}
	return st, nil
}
