// Package cluster is layer 2 of dralab's DRA driver conformance suite:
// e2e-framework features that check, on a running cluster, what a driver's
// manifest says it supports. Device counts and attributes are discovered
// from the driver's ResourceSlices, never declared. A feature whose
// capability the manifest does not enable is skipped, saying so; one the
// manifest enables but the suite has no check for, or cannot check on this
// cluster, fails (unless Options.AllowUnverified): a run passes only on
// what it verified.
//
// Everything the features create (namespaces, claims, pods,
// DeviceTaintRules) carries LabelManagedBy and LabelRun and is removed when
// its feature ends, however it ends. Runs on one cluster take turns, one
// feature at a time, through a Lease (LockNamespace/LockName) that the run
// holding it renews; a feature first removes what an interrupted run left,
// found by LabelManagedBy, and nothing else. The only device a feature
// taints is one it was allocated.
//
// Run runs them and returns their results (dralab-conformance does); a
// driver author's own e2e-framework suite can run them as features:
//
//	testenv.Test(t, cluster.Features(m, cluster.Options{})...)
package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
)

// Options tune the features to the cluster.
type Options struct {
	// Image runs the proof containers; it must have sh and env. Empty:
	// busybox.
	Image string
	// PullPolicy of the proof containers; empty: IfNotPresent.
	PullPolicy v1.PullPolicy
	// RunID is the value of LabelRun on what the run creates; empty: a
	// random one.
	RunID string
	// CommandEnv are variables (KEY=value) added to the environment of the
	// manifest's health commands, e.g. which lab they act on.
	CommandEnv []string
	// AllowUnverified reports a check of an enabled capability that
	// cannot be made on this cluster as skipped, with a warning, instead
	// of failed.
	AllowUnverified bool
	// Together are the manifests of other drivers whose devices sit on
	// the same nodes: the list-attributes check may pair the driver's
	// devices with theirs, aligned by their topology expressions.
	Together []*manifest.Manifest
	// PodResources, if set, calls List on a node's kubelet podresources
	// API (its socket, /var/lib/kubelet/pod-resources/kubelet.sock on a
	// real node): the KubeletPodResourcesDynamicResources check needs it,
	// and is not verified without.
	PodResources func(ctx context.Context, node string) (*podresourcesapi.ListPodResourcesResponse, error)
	// PodResourcesNodes are the nodes PodResources can read, where the
	// check's pod is kept; empty: every node.
	PodResourcesNodes []string
	// Tolerations are added to every pod the suite creates, beside the
	// manifest's proofPod (--toleration).
	Tolerations []v1.Toleration
}

// Labels of every object the suite creates. A run removes objects with
// LabelManagedBy=ManagedBy and another LabelRun before its first feature:
// what an interrupted run left behind.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "dralab-conformance"
	LabelRun       = "conformance.dralab.dev/run"
)

// TaintKey is the key of the taint the device-taints feature puts on the
// one device it was allocated.
const TaintKey = "conformance.dralab.dev/tainted"

// LabelCapability labels each feature with the capability it checks
// ("core" for what every driver must do), for --labels.
const LabelCapability = "capability"

// Result is what one feature found.
type Result struct {
	// Feature is the feature's name, e.g. "single device".
	Feature string
	// Capability is what the feature checks: "core" for what every driver
	// must do, else the manifest's capability.
	Capability string
	// Rule is what the feature requires of the driver, in words.
	Rule   string
	Status results.Status
	// Message says why the feature failed or was skipped.
	Message string
	// Log is what the check noted as it ran: what it saw the driver do.
	Log     []string
	Elapsed time.Duration
}

// Run runs every feature of the manifest's driver on the cluster of cfg,
// one after the other, and returns a result per feature. A misbehaving
// driver or cluster fails features; it never makes Run panic.
func Run(ctx context.Context, m *manifest.Manifest, cfg *rest.Config, o Options) []Result {
	s := newSuite(m, o)
	var out []Result
	for _, f := range s.features() {
		var log []string
		r := s.run(ctx, cfg, f, func(format string, args ...any) { log = append(log, fmt.Sprintf(format, args...)) })
		r.Log = log
		out = append(out, r)
	}
	return out
}

// Features returns one e2e-framework feature per check of the manifest's
// driver, labelled with LabelCapability, for a driver author's own suite.
func Features(m *manifest.Manifest, o Options) []features.Feature {
	s := newSuite(m, o)
	var out []features.Feature
	for _, f := range s.features() {
		out = append(out, features.New(f.name).WithLabel(LabelCapability, f.label()).
			Assess(f.rule, func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
				r := s.run(ctx, cfg.Client().RESTConfig(), f, t.Logf)
				switch r.Status {
				case results.Skipped:
					t.Skip(r.Message)
				case results.Failed:
					t.Fatal(r.Message)
				}
				return ctx
			}).Feature())
	}
	return out
}

func newSuite(m *manifest.Manifest, o Options) *suite {
	if o.Image == "" {
		o.Image = "busybox:1.37"
	}
	if o.PullPolicy == "" {
		o.PullPolicy = v1.PullIfNotPresent
	}
	if o.RunID == "" {
		o.RunID = rand.String(8)
	}
	return &suite{m: m, o: o}
}

// feature is one check with what it checks.
type feature struct {
	name       string
	capability manifest.Capability
	rule       string
	check      check
}

// CoreCapability is Result.Capability of the checks every driver must
// pass.
const CoreCapability = "core"

func (f feature) label() string {
	if f.capability == "" {
		return CoreCapability
	}
	return string(f.capability)
}

// features are the suite's checks in the order they run.
func (s *suite) features() []feature {
	return []feature{
		{"single device", "", "a pod with a claim of the class runs and proves its device", s.singleDevice},
		{"shared claim", manifest.SharedClaims, "two pods sharing one claim prove the same device", s.sharedClaim},
		{"group claim", manifest.DRAWorkloadResourceClaims, "a PodGroup's claim is made once for the group, reserved for it, and every pod of the group proves its device", s.groupClaim},
		{"prioritized list", manifest.DRAPrioritizedList, "the first class with a free device is chosen", s.prioritizedList},
		{"admin access", manifest.DRAAdminAccess, "an admin claim gets an in-use device, the workload keeps it", s.adminAccess},
		{"device taints", manifest.DRADeviceTaints, "tainted devices are not allocated until untainted", s.deviceTaints},
		{"extended resource", manifest.DRAExtendedResource, "a pod asking for the extended resource gets a device", s.extendedResource},
		{"opaque config", manifest.OpaqueConfig, "valid configuration is prepared, invalid configuration fails preparation", s.opaqueConfig},
		{"partitionable devices", manifest.DRAPartitionableDevices, "partitions are allocated until their counters are exhausted, never beyond, and the next claim waits", s.partitions},
		{"consumable capacity", manifest.DRAConsumableCapacity, "two claims share one device with distinct shareIDs within its capacity", s.shares},
		{"binding conditions", manifest.DRADeviceBindingConditions, "a pod is not bound before its device's binding conditions are True in the claim's status, and is bound and runs after", s.bindingConditions},
		{"claim device status", manifest.DRAResourceClaimDeviceStatus, "a prepared claim's status.devices has the driver's entry for its device, removed once the claim is unprepared", s.deviceStatus},
		{"resource health", manifest.ResourceHealthStatus, "a failed device is reported Unhealthy in the status of the pod that holds it", s.health},
		{"network data", manifest.NetworkData, "a prepared network device's claim status has its network data, and the container sees the interface it names", s.networkData},
		{"derived attributes", manifest.DRADerivedAttributes, "requests matching on a derived attribute of the topology expression get devices of one value; requests held to values that share none wait", s.derivedAttributes},
		{"list attributes", manifest.DRAListTypeAttributes, "a device with a list of values matches a device of each of them, and distinctAttribute keeps it from one that shares a value", s.listAttributes},
		{"device metadata", manifest.DeviceMetadata, "a container finds its claim's device metadata file, naming the claim and exactly its allocated device with the attributes the device's ResourceSlice publishes", s.deviceMetadata},
		{"node-allocatable resources", manifest.DRANodeAllocatableResources, "a pod's status accounts exactly the node resources its device declares, and a pod whose container fits a node's free resources alone, but not with its device's share, waits", s.nodeAllocatable},
		{"podresources", manifest.KubeletPodResourcesDynamicResources, "a node's kubelet lists on its podresources API the pod's container with exactly its claim's allocated device, and not once the pod is gone", s.podResources},
		{"optional node operations", manifest.DRAOptionalNodeOperations, "a pod given a device whose pool skips NodePrepareResources runs, its allocation carries the skip, and the driver never prepares it", s.optionalNodeOperations},
	}
}

type suite struct {
	m *manifest.Manifest
	o Options
}

// labels mark what the run creates.
func (s *suite) labels() map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelRun: s.o.RunID}
}

// logFunc notes what a check saw, as t.Logf does.
type logFunc func(format string, args ...any)

type check func(ctx context.Context, logf logFunc, k *kit) error

// run runs one feature: skipped when its capability is off, run in a
// namespace of its own that is deleted afterwards, after what an earlier
// run left is gone. A check that passed but left something behind fails.
func (s *suite) run(ctx context.Context, cfg *rest.Config, f feature, logf logFunc) (r Result) {
	r = Result{Feature: f.name, Capability: f.label(), Rule: f.rule}
	start := time.Now()
	defer func() { r.Elapsed = time.Since(start) }()
	fail := func(format string, args ...any) Result {
		r.Status, r.Message = results.Failed, fmt.Sprintf(format, args...)
		return r
	}
	switch skip, failure := gate(s.m, f.capability, f.check != nil); {
	case skip != "":
		r.Status, r.Message = results.Skipped, skip
		return r
	case failure != "":
		return fail("%s", failure)
	}
	client, err := kubernetes.NewForConfig(clientConfig(cfg))
	if err != nil {
		return fail("%v", err)
	}
	// Runs on one cluster take turns, a feature at a time; the lock is
	// released once the feature has cleaned up.
	outer := ctx
	ctx, release, err := s.lock(outer, client, logf)
	if err != nil {
		return fail("%v", err)
	}
	defer release()
	// Claims an interrupted run left hold devices; its rules taint them.
	// Under the lock, every other run is between features, with nothing
	// left in the cluster: what carries another run's label is an
	// interrupted run's.
	removed, err := removeLeftovers(ctx, client, s.o.RunID, s.m.Timeouts.PodRunning)
	if len(removed) > 0 {
		logf("removed what an interrupted run left: %s", strings.Join(removed, ", "))
	}
	if err != nil {
		return fail("removing what an interrupted run left: %v", err)
	}
	k := &kit{suite: s, client: client, ns: "conformance-" + rand.String(5)}
	if err := k.createNamespace(ctx, f.capability == manifest.DRAAdminAccess); err != nil {
		return fail("%v", err)
	}
	defer func() {
		if p := recover(); p != nil {
			r.Status, r.Message = results.Failed, fmt.Sprintf("%s: internal: the check panicked: %v", f.name, p)
		}
		if cause := context.Cause(ctx); errors.Is(cause, errLockLost) {
			r.Status, r.Message = results.Failed, fmt.Sprintf("%s: %v", f.name, cause)
		}
		if err := k.cleanup(outer); err != nil {
			if r.Status == results.Failed {
				r.Message += "; cleaning up also failed: " + err.Error()
			} else {
				r.Status, r.Message = results.Failed, err.Error()
			}
		}
	}()
	r.Status, r.Message = s.verdict(f.name, f.check(ctx, logf, k))
	return r
}

// verdict is what a check's error says of its feature: passed on no error;
// not verified, the cluster's, where the cluster kept its pod off every
// node its claims fit (never the driver's failure, never a pass); not
// verified when the check could not be made here (a failure unless
// Options.AllowUnverified); failed otherwise.
func (s *suite) verdict(name string, err error) (results.Status, string) {
	if kept := (keptOff{}); errors.As(err, &kept) {
		return keptOffVerdict(name, kept)
	}
	if skip := (skipCheck{}); errors.As(err, &skip) {
		return results.Unverified(s.o.AllowUnverified, name+": "+skip.reason)
	}
	if err != nil {
		return results.Failed, fmt.Sprintf("%s: %v", name, err)
	}
	return results.Passed, ""
}

// gate says why a feature does not run its check: a reason to skip when
// the manifest does not enable its capability, a reason to fail when it
// does but the suite has no check for it, so that a run passes only on
// what it verified.
func gate(m *manifest.Manifest, capability manifest.Capability, checked bool) (skip, fail string) {
	switch {
	case capability != "" && !m.Enabled(capability):
		return fmt.Sprintf("the manifest does not enable %s", capability), ""
	case !checked:
		return "", fmt.Sprintf("the manifest enables %s, but this suite has no check for it: it is not verified; disable it until the suite checks it", capability)
	}
	return "", ""
}

// skipCheck is a check that cannot be made on this cluster, with the
// reason: the feature is not verified, a failure unless
// Options.AllowUnverified.
type skipCheck struct{ reason string }

func (s skipCheck) Error() string { return s.reason }

// clientConfig is the suite's client configuration: the checks poll a few
// objects five times a second, which client-go's default limits (5 queries
// a second, bursts of 10) would throttle, slowing every check and, near a
// deadline, failing calls with the rate limiter's error.
func clientConfig(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	if c.QPS == 0 && c.Burst == 0 && c.RateLimiter == nil {
		c.QPS, c.Burst = 50, 100
	}
	return c
}
