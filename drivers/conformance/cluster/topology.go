package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
	"github.com/dralab/dralab/drivers/conformance/manifest"
)

// topologyAttribute is the derived attribute the checks' requests compute
// from the manifest's topology expression: a domain no driver publishes.
const topologyAttribute = "conformance.dralab.dev/topology"

// valued is a device with a value computed for it.
type valued struct {
	devices.Device
	value *resourceapi.DeviceAttribute
}

// derivedAttributes: requests that compute the manifest's topology
// expression as a derived attribute and match on it get devices of one
// value: one request held to a value, the other free to take any device
// of the class, both get that value. Requests held to two values that
// share none wait, unschedulable. Both claims are on one node, which has
// free devices of two values.
func (s *suite) derivedAttributes(ctx context.Context, logf logFunc, k *kit) error {
	expr := k.m.Topology.Expression
	node, first, second, err := k.twoValues(ctx, expr)
	if err != nil {
		return err
	}
	request := func(name string, value *resourceapi.DeviceAttribute) (resourceapi.DeviceRequest, error) {
		r := k.request(name)
		r.Exactly.DerivedAttributes = []resourceapi.DeviceDerivedAttribute{{Name: topologyAttribute, Expression: expr}}
		if value != nil {
			lit, err := celValue(value)
			if err != nil {
				return r, err
			}
			r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("(%s) == %s", expr, lit)}}}
		}
		return r, nil
	}
	match := []resourceapi.DeviceConstraint{{Requests: []string{"a", "b"}, MatchAttribute: ptr.To[resourceapi.FullyQualifiedName](topologyAttribute)}}
	onNode := onNodes([]string{node})

	// Held apart: must wait.
	a, err := request("a", first.value)
	if err != nil {
		return err
	}
	b, err := request("b", second.value)
	if err != nil {
		return err
	}
	if err := k.createClaimOf(ctx, "apart", resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{a, b}, Constraints: match}); err != nil {
		return err
	}
	if err := k.derivedKept(ctx, "apart"); err != nil {
		return err
	}
	if err := k.pod(ctx, "apart", []string{"apart"}, onNode); err != nil {
		return err
	}
	if err := k.unschedulable(ctx, "apart", fmt.Sprintf("a claim whose requests must share %s but are held to %s and %s", topologyAttribute, valueString(first.value), valueString(second.value))); err != nil {
		return err
	}
	if err := k.remove(ctx, []string{"apart"}, []string{"apart"}); err != nil {
		return err
	}
	logf("on node %s, requests held to %s = %s and %s wait, unschedulable", node, expr, valueString(first.value), valueString(second.value))

	// Aligned: b follows a.
	b, err = request("b", nil)
	if err != nil {
		return err
	}
	if err := k.createClaimOf(ctx, "aligned", resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{a, b}, Constraints: match}); err != nil {
		return err
	}
	if err := k.pod(ctx, "aligned", []string{"aligned"}, onNode); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "aligned"); err != nil {
		return err
	}
	results, err := k.claimResults(ctx, "aligned")
	if err != nil {
		return err
	}
	got, err := k.derivedOf(ctx, expr, node, results)
	if err != nil {
		return err
	}
	if len(got) != 2 {
		return fmt.Errorf("claim aligned got %v, want two devices", results)
	}
	if !sameValue(got[0].value, first.value) {
		return fmt.Errorf("request a, held to %s, got %s/%s of value %s", valueString(first.value), got[0].Pool, got[0].Name, valueString(got[0].value))
	}
	if !overlap(got[0].value, got[1].value) {
		return fmt.Errorf("claim aligned matches on %s, yet got %s/%s of value %s and %s/%s of value %s", topologyAttribute, got[0].Pool, got[0].Name, valueString(got[0].value), got[1].Pool, got[1].Name, valueString(got[1].value))
	}
	logf("with matchAttribute on %s, request a (held to %s) got %s/%s and request b, free, %s/%s of value %s", topologyAttribute, valueString(first.value), got[0].Pool, got[0].Name, got[1].Pool, got[1].Name, valueString(got[1].value))
	return nil
}

// twoValues finds a node with free devices of the class of two values of
// expr that share none, two devices of the first: the value of each of
// its devices of the class must be computable, as the allocator computes
// it for every candidate.
func (k *kit) twoValues(ctx context.Context, expr string) (string, valued, valued, error) {
	var none valued
	st, err := devices.Read(ctx, k.client, k.m.Driver)
	if err != nil {
		return "", none, none, err
	}
	quiet, err := k.quietNodes(ctx)
	if err != nil {
		return "", none, none, err
	}
	free := st.Free(k.m.Driver, "")
	nodeOf := map[devices.Key]string{}
	for _, d := range free {
		nodeOf[d.Key()] = d.Node
	}
	in, err := classDevices(ctx, k.client, k.m.DeviceClass, fromDevices(free))
	if err != nil {
		return "", none, none, err
	}
	byNode := map[string][]valued{}
	// A node where the expression fails on a device of the class is no
	// place for the check: the allocator gives up a claim that computes
	// it there.
	failing := map[string]string{}
	for _, c := range in {
		d := devices.Device{Driver: c.driver, Pool: c.pool, Node: nodeOf[devices.Key{Driver: c.driver, Pool: c.pool, Device: c.dev.Name}], Device: c.dev}
		if d.Node == "" || slices.Contains(quiet, d.Node) {
			continue
		}
		v, err := devices.Derive(ctx, expr, devices.Input(d.Driver, &d.Device))
		if err != nil {
			failing[d.Node] = fmt.Sprintf("%s fails on %s: %v", expr, d.Key(), err)
			continue
		}
		byNode[d.Node] = append(byNode[d.Node], valued{d, v})
	}
	for node := range failing {
		delete(byNode, node)
	}
	// The value held is, where the node allows, not that of its first
	// device: a free request would take that one by first fit alone, so
	// getting one of the held value shows the constraint at work.
	var fallback struct {
		node string
		a, b valued
	}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		devs := byNode[node]
		for _, a := range devs {
			twin := slices.ContainsFunc(devs, func(o valued) bool { return o.Key() != a.Key() && sameValue(o.value, a.value) })
			i := slices.IndexFunc(devs, func(b valued) bool { return !overlap(a.value, b.value) })
			if !twin || i < 0 {
				continue
			}
			if !overlap(devs[0].value, a.value) {
				return node, a, devs[i], nil
			}
			if fallback.node == "" {
				fallback.node, fallback.a, fallback.b = node, a, devs[i]
			}
		}
	}
	if fallback.node != "" {
		return fallback.node, fallback.a, fallback.b, nil
	}
	why := fmt.Sprintf("no node has free devices of class %s of two values of %s that share none, two of one of them: the check needs such a node", k.m.DeviceClass, expr)
	for _, node := range slices.Sorted(maps.Keys(failing)) {
		why += fmt.Sprintf("; node %s is left out: %s", node, failing[node])
	}
	return "", none, none, skipCheck{why}
}

// derivedOf finds the allocated devices among the node's published ones
// and computes expr for each, in the order of the results.
func (k *kit) derivedOf(ctx context.Context, expr, node string, results []resourceapi.DeviceRequestAllocationResult) ([]valued, error) {
	st, err := nodeState(ctx, k.client, k.m.Driver, node)
	if err != nil {
		return nil, err
	}
	published := st.Published(k.m.Driver, node)
	var out []valued
	for _, r := range results {
		i := slices.IndexFunc(published, func(d devices.Device) bool {
			return d.Key() == devices.Key{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
		})
		if i < 0 {
			return nil, fmt.Errorf("device %s/%s/%s of request %s is not published for node %s", r.Driver, r.Pool, r.Device, r.Request, node)
		}
		d := published[i]
		v, err := devices.Derive(ctx, expr, devices.Input(d.Driver, &d.Device))
		if err != nil {
			return nil, fmt.Errorf("%s on %s: %w", expr, d.Key(), err)
		}
		out = append(out, valued{d, v})
	}
	return out, nil
}

// derivedKept fails when the API server dropped a claim's derived
// attributes, as it does for a cluster without the DRADerivedAttributes
// gate: the claim would then wait for an attribute no device has, which
// proves nothing.
func (k *kit) derivedKept(ctx context.Context, name string) error {
	c, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil && len(r.Exactly.DerivedAttributes) == 0 {
			return skipCheck{fmt.Sprintf("the API server dropped the derivedAttributes of claim %s's request %s: the cluster does not have the DRADerivedAttributes gate on", name, r.Name)}
		}
	}
	return nil
}

// unschedulable waits until the scheduler finds the pod unschedulable,
// and fails if it is scheduled; why says what the pod asks for.
func (k *kit) unschedulable(ctx context.Context, name, why string) error {
	return poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("the scheduler to find pod %s unschedulable: %s", name, why), func(ctx context.Context) (string, bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		state := podState(pod)
		if pod.Spec.NodeName != "" {
			return state, false, settle(fmt.Errorf("pod %s was scheduled, to %s, with %s (pod: %s)", name, pod.Spec.NodeName, why, state))
		}
		// Unschedulable for the cluster's reasons, not for what it asks.
		if err := k.keptOff(ctx, pod); err != nil {
			return state, false, err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				return state, true, nil
			}
		}
		return state, false, nil
	})
}

// values are an attribute's values as CEL literals, one for a scalar.
func values(a *resourceapi.DeviceAttribute) []string {
	if a == nil {
		return nil
	}
	var out []string
	switch {
	case a.IntValue != nil:
		out = append(out, strconv.FormatInt(*a.IntValue, 10))
	case a.BoolValue != nil:
		out = append(out, strconv.FormatBool(*a.BoolValue))
	case a.StringValue != nil:
		out = append(out, quoteCEL(*a.StringValue))
	case a.VersionValue != nil:
		out = append(out, "semver("+quoteCEL(*a.VersionValue)+")")
	}
	for _, v := range a.IntValues {
		out = append(out, strconv.FormatInt(v, 10))
	}
	for _, v := range a.BoolValues {
		out = append(out, strconv.FormatBool(v))
	}
	for _, v := range a.StringValues {
		out = append(out, quoteCEL(v))
	}
	for _, v := range a.VersionValues {
		out = append(out, "semver("+quoteCEL(v)+")")
	}
	return out
}

// isList tells whether an attribute holds a list.
func isList(a *resourceapi.DeviceAttribute) bool {
	return a != nil && (a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil)
}

// celValue writes an attribute as a CEL literal that equals it: a scalar,
// or a list. A version compares by semver(), not ==.
func celValue(a *resourceapi.DeviceAttribute) (string, error) {
	vs := values(a)
	switch {
	case len(vs) == 0:
		return "", fmt.Errorf("no value")
	case a.VersionValue != nil || a.VersionValues != nil:
		return "", fmt.Errorf("a version (%s) has no literal a selector can compare with ==", valueString(a))
	case isList(a):
		return "[" + strings.Join(vs, ", ") + "]", nil
	}
	return vs[0], nil
}

func valueString(a *resourceapi.DeviceAttribute) string {
	vs := values(a)
	if isList(a) {
		return "[" + strings.Join(vs, ", ") + "]"
	}
	return strings.Join(vs, "")
}

// sameValue tells whether two attributes are equal, lists element by
// element.
func sameValue(a, b *resourceapi.DeviceAttribute) bool {
	return a != nil && b != nil && isList(a) == isList(b) && slices.Equal(values(a), values(b))
}

// overlap tells whether matchAttribute puts two values together: with
// list-type attributes a value is a set, and two match when they share an
// element (a scalar is a set of one).
func overlap(a, b *resourceapi.DeviceAttribute) bool {
	vb := values(b)
	return slices.ContainsFunc(values(a), func(v string) bool { return slices.Contains(vb, v) })
}

// listPlan is what the list-attributes check claims: a device with a list
// of values, and a partner for each of two of them.
type listPlan struct {
	node   string
	list   valued
	x, y   valued
	with   *manifest.Manifest // the partners' driver's manifest
	direct bool               // partners of the same driver, matched on the attribute itself
}

// listAttributes: on one node a device publishes the manifest's list
// attribute with several values, x and y among them. A claim for it, a
// device of value x and a device of value y, matching the list device
// with each, is allocated all three: the list is a set, which a single
// value could not match both ways. The list device and the device of value
// x with distinctAttribute wait. The partners are the driver's own devices
// where the node has them, matched on the attribute itself; else devices
// of a driver checked together (Options.Together) whose topology
// expression gives the values, matched through a derived attribute each
// request computes (the cluster then needs DRADerivedAttributes too).
func (s *suite) listAttributes(ctx context.Context, logf logFunc, k *kit) error {
	plan, err := k.listPlan(ctx)
	if err != nil {
		return err
	}
	attr := resourceapi.FullyQualifiedName(k.m.ListAttribute.Name)
	domain, id := qualify(k.m.Driver, resourceapi.QualifiedName(attr))
	own := fmt.Sprintf("device.attributes[%s][%s]", quoteCEL(domain), quoteCEL(id))
	matchOn := attr
	if !plan.direct {
		matchOn = topologyAttribute
	}
	request := func(name string, m *manifest.Manifest, selector string, value *resourceapi.DeviceAttribute, derive string) (resourceapi.DeviceRequest, error) {
		lit, err := celValue(value)
		if err != nil {
			return resourceapi.DeviceRequest{}, err
		}
		r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: m.DeviceClass,
			Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("(%s) == %s", selector, lit)}}},
		}}
		if !plan.direct {
			r.Exactly.DerivedAttributes = []resourceapi.DeviceDerivedAttribute{{Name: topologyAttribute, Expression: derive}}
		}
		return r, nil
	}
	partnerExpr := own
	if !plan.direct {
		partnerExpr = plan.with.Topology.Expression
	}
	list, err := request("list", k.m, own, plan.list.value, own)
	if err != nil {
		return err
	}
	px, err := request("x", plan.with, partnerExpr, plan.x.value, partnerExpr)
	if err != nil {
		return err
	}
	py, err := request("y", plan.with, partnerExpr, plan.y.value, partnerExpr)
	if err != nil {
		return err
	}
	onNode := onNodes([]string{plan.node})

	// Kept apart from a device that shares a value: must wait.
	apart := []resourceapi.DeviceConstraint{{Requests: []string{"list", "x"}, DistinctAttribute: ptr.To(matchOn)}}
	if err := k.createClaimOf(ctx, "apart", resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{list, px}, Constraints: apart}); err != nil {
		return err
	}
	if !plan.direct {
		if err := k.derivedKept(ctx, "apart"); err != nil {
			return err
		}
	}
	if err := k.pod(ctx, "apart", []string{"apart"}, onNode); err != nil {
		return err
	}
	if err := k.unschedulable(ctx, "apart", fmt.Sprintf("a claim keeping %s of value %s distinct, on %s, from a device of value %s", plan.list.Key(), valueString(plan.list.value), matchOn, valueString(plan.x.value))); err != nil {
		return err
	}
	if err := k.remove(ctx, []string{"apart"}, []string{"apart"}); err != nil {
		return err
	}
	logf("on node %s, %s of %s %s kept distinct from a device of value %s waits, unschedulable", plan.node, plan.list.Key(), attr, valueString(plan.list.value), valueString(plan.x.value))

	// Matched with both: allocated.
	both := []resourceapi.DeviceConstraint{
		{Requests: []string{"list", "x"}, MatchAttribute: ptr.To(matchOn)},
		{Requests: []string{"list", "y"}, MatchAttribute: ptr.To(matchOn)},
	}
	if err := k.createClaimOf(ctx, "sets", resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{list, px, py}, Constraints: both}); err != nil {
		return err
	}
	if err := k.pod(ctx, "sets", []string{"sets"}, onNode); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "sets"); err != nil {
		return err
	}
	results, err := k.claimResults(ctx, "sets")
	if err != nil {
		return err
	}
	got := map[string]resourceapi.DeviceRequestAllocationResult{}
	for _, r := range results {
		got[r.Request] = r
	}
	if len(results) != 3 || got["list"].Driver != k.m.Driver || got["x"].Driver != plan.with.Driver || got["y"].Driver != plan.with.Driver {
		return fmt.Errorf("claim sets got %v, want one device of %s for request list and one of %s for each of x and y", results, k.m.Driver, plan.with.Driver)
	}
	// What the allocation holds must bear the plan out: the list device's
	// values hold x's and y's.
	st, err := nodeState(ctx, k.client, k.m.Driver, plan.node)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(st.Published(k.m.Driver, plan.node), func(d devices.Device) bool {
		return d.Pool == got["list"].Pool && d.Name == got["list"].Device
	})
	if i < 0 {
		return fmt.Errorf("device %s/%s of request list is not published for node %s", got["list"].Pool, got["list"].Device, plan.node)
	}
	ld := st.Published(k.m.Driver, plan.node)[i]
	lv, ok := attribute(device{driver: ld.Driver, pool: ld.Pool, dev: ld.Device}, domain, id)
	if !ok || !isList(&lv) || !overlap(&lv, plan.x.value) || !overlap(&lv, plan.y.value) {
		return fmt.Errorf("request list got %s/%s, whose %s is %s: not a list holding %s and %s", ld.Pool, ld.Name, attr, valueString(&lv), valueString(plan.x.value), valueString(plan.y.value))
	}
	logf("matching on %s, request list got %s/%s (%s) with request x %s/%s/%s (%s) and request y %s/%s/%s (%s)", matchOn, ld.Pool, ld.Name, valueString(&lv),
		got["x"].Driver, got["x"].Pool, got["x"].Device, valueString(plan.x.value), got["y"].Driver, got["y"].Pool, got["y"].Device, valueString(plan.y.value))
	return nil
}

// listPlan finds a node with a free device of the class whose list
// attribute holds several values, and free partners for two of them: the
// driver's own devices of the class, valued by the attribute, else a
// driver's checked together, valued by its topology expression.
func (k *kit) listPlan(ctx context.Context) (listPlan, error) {
	attr := k.m.ListAttribute.Name
	domain, id := qualify(k.m.Driver, resourceapi.QualifiedName(attr))
	own, err := k.freeOfClass(ctx, k.m, func(d devices.Device) (*resourceapi.DeviceAttribute, error) {
		v, ok := attribute(device{driver: d.Driver, pool: d.Pool, dev: d.Device}, domain, id)
		if !ok {
			return nil, nil
		}
		return &v, nil
	})
	if err != nil {
		return listPlan{}, err
	}
	lists := 0
	for _, node := range slices.Sorted(maps.Keys(own)) {
		for _, l := range own[node] {
			if !isList(l.value) || len(values(l.value)) < 2 {
				continue
			}
			lists++
			if x, y, ok := partners(l, own[node]); ok {
				return listPlan{node: node, list: l, x: x, y: y, with: k.m, direct: true}, nil
			}
			for _, o := range k.o.Together {
				if o.Topology == nil {
					continue
				}
				theirs, err := k.freeOfClass(ctx, o, func(d devices.Device) (*resourceapi.DeviceAttribute, error) {
					return devices.Derive(ctx, o.Topology.Expression, devices.Input(d.Driver, &d.Device))
				})
				if err != nil {
					return listPlan{}, err
				}
				if x, y, ok := partners(l, theirs[node]); ok {
					return listPlan{node: node, list: l, x: x, y: y, with: o}, nil
				}
			}
		}
	}
	if lists == 0 {
		return listPlan{}, skipCheck{fmt.Sprintf("no free device of class %s publishes %s as a list of two values or more (the cluster needs the DRAListTypeAttributes gate on)", k.m.DeviceClass, attr)}
	}
	return listPlan{}, skipCheck{fmt.Sprintf("%d free devices of class %s publish %s as a list, but no node has, beside one, free devices of the driver's (or of a driver checked with it, by its topology expression) for two of its values, each holding one and not the other", lists, k.m.DeviceClass, attr)}
}

// freeOfClass lists, by node, the free devices of a manifest's class that
// value gives a value (nil: left out), off quietNodes.
func (k *kit) freeOfClass(ctx context.Context, m *manifest.Manifest, value func(devices.Device) (*resourceapi.DeviceAttribute, error)) (map[string][]valued, error) {
	st, err := devices.Read(ctx, k.client, m.Driver)
	if err != nil {
		return nil, err
	}
	free := st.Free(m.Driver, "")
	nodeOf := map[devices.Key]string{}
	for _, d := range free {
		nodeOf[d.Key()] = d.Node
	}
	in, err := classDevices(ctx, k.client, m.DeviceClass, fromDevices(free))
	if err != nil {
		return nil, err
	}
	quiet, err := k.quietNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]valued{}
	for _, c := range in {
		d := devices.Device{Driver: c.driver, Pool: c.pool, Node: nodeOf[devices.Key{Driver: c.driver, Pool: c.pool, Device: c.dev.Name}], Device: c.dev}
		if d.Node == "" || slices.Contains(quiet, d.Node) {
			continue
		}
		v, err := value(d)
		if err != nil || v == nil {
			continue
		}
		out[d.Node] = append(out[d.Node], valued{d, v})
	}
	return out, nil
}

// partners finds, among candidates, a device for each of two of the list
// device's values that holds that value and not the other.
func partners(l valued, candidates []valued) (valued, valued, bool) {
	vs := values(l.value)
	holds := func(c valued, v string) bool { return slices.Contains(values(c.value), v) }
	for i, x := range vs {
		for _, y := range vs[i+1:] {
			if x == y {
				continue
			}
			ix := slices.IndexFunc(candidates, func(c valued) bool { return c.Key() != l.Key() && holds(c, x) && !holds(c, y) })
			iy := slices.IndexFunc(candidates, func(c valued) bool { return c.Key() != l.Key() && holds(c, y) && !holds(c, x) })
			if ix >= 0 && iy >= 0 {
				return candidates[ix], candidates[iy], true
			}
		}
	}
	return valued{}, valued{}, false
}
