package sanity

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// maxConcurrent is how many claims the concurrent check prepares at once:
// enough for races between calls to show, few enough for small nodes.
const maxConcurrent = 4

func checkRegistration(ctx context.Context, e *env) (string, error) {
	const rule = "registration"
	p, err := e.s.findPlugin(ctx)
	if err != nil {
		return "", err
	}
	var errs []error
	if p.info.Type != registerapi.DRAPlugin {
		errs = append(errs, broke(rule, "GetInfo on %s answers type %q, want %q", p.socket, p.info.Type, registerapi.DRAPlugin))
	}
	if !slices.Contains(p.info.SupportedVersions, drapb.DRAPluginService) {
		errs = append(errs, broke(rule, "GetInfo on %s lists supported versions %q, without %q, the DRA v1 service the kubelet calls", p.socket, p.info.SupportedVersions, drapb.DRAPluginService))
	}
	errs = append(errs, checkEndpoint(ctx, e, p))
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s registers %s %q at %s, versions %q", p.socket, p.info.Type, p.info.Name, p.info.Endpoint, p.info.SupportedVersions), nil
}

// checkEndpoint requires the endpoint GetInfo names to be a socket that
// answers the DRA service: the kubelet dials it for every pod.
func checkEndpoint(ctx context.Context, e *env, p *plugin) error {
	const rule = "registration"
	endpoint := p.info.Endpoint
	if endpoint == "" {
		return broke(rule, "GetInfo on %s names no endpoint", p.socket)
	}
	fi, err := os.Stat(endpoint)
	switch {
	case err != nil:
		return broke(rule, "endpoint %s named by GetInfo on %s: %v", endpoint, p.socket, err)
	case fi.Mode().Type() != os.ModeSocket:
		return broke(rule, "endpoint %s named by GetInfo on %s is not a socket but %v", endpoint, p.socket, fi.Mode().Type())
	}
	conn, err := dial(endpoint)
	if err != nil {
		return broke(rule, "%v", err)
	}
	defer conn.Close()
	if err := pingDRA(ctx, drapb.NewDRAPluginClient(conn), infoTimeout); err != nil {
		return broke(rule, "endpoint %s does not answer the DRA v1 service: %v", endpoint, err)
	}
	return nil
}

// preparedClaim connects to the driver and prepares a new claim of one
// free device, checking the answer with the prepare rule: what every check
// of a prepared claim starts from.
func (e *env) preparedClaim(ctx context.Context) (*resourceapi.ResourceClaim, []*drapb.Device, error) {
	if _, err := e.connect(ctx); err != nil {
		return nil, nil, err
	}
	devs, err := e.freeDevices(ctx, 1)
	if err != nil {
		return nil, nil, err
	}
	c, err := e.newClaim(ctx, devs[0])
	if err != nil {
		return nil, nil, err
	}
	got, err := e.prepare(ctx, "prepare", c)
	if err != nil {
		return nil, nil, err
	}
	return c, got, nil
}

func checkPrepare(ctx context.Context, e *env) (string, error) {
	c, got, err := e.preparedClaim(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("claim %s prepared: %s", klog.KObj(c), describeDevices(got)), nil
}

func checkCDIIDsResolve(ctx context.Context, e *env) (string, error) {
	c, got, err := e.preparedClaim(ctx)
	if err != nil {
		return "", err
	}
	ids := cdiIDs(got)
	if len(ids) == 0 {
		// Some devices, a NIC configured by the driver itself, need no
		// container edits; nothing can be resolved then.
		return "", skipError{reason: fmt.Sprintf("claim %s was prepared without CDI devices: nothing to resolve", klog.KObj(c))}
	}
	if err := e.s.resolveCDI("cdi-ids-resolve", "returned for claim "+klog.KObj(c).String(), ids); err != nil {
		return "", err
	}
	return fmt.Sprintf("CDI devices %q of claim %s resolve in %s", ids, klog.KObj(c), e.s.cfg.CDIDir), nil
}

func checkPrepareIdempotent(ctx context.Context, e *env) (string, error) {
	const rule = "prepare-idempotent"
	c, first, err := e.preparedClaim(ctx)
	if err != nil {
		return "", err
	}
	// The kubelet prepares a claim again after its own restart and for
	// each further pod sharing it; the answer must not change.
	again, err := e.prepare(ctx, rule, c)
	if err != nil {
		return "", err
	}
	if a, b := describeDevices(first), describeDevices(again); a != b {
		return "", broke(rule, "preparing claim %s again returned %s, the first time %s", klog.KObj(c), b, a)
	}
	return fmt.Sprintf("claim %s prepared twice: %s", klog.KObj(c), describeDevices(first)), nil
}

func checkUnprepareIdempotent(ctx context.Context, e *env) (string, error) {
	const rule = "unprepare-idempotent"
	c, _, err := e.preparedClaim(ctx)
	if err != nil {
		return "", err
	}
	if err := e.unprepare(ctx, rule, c); err != nil {
		return "", err
	}
	// The kubelet unprepares again when it does not know whether the
	// first call got through, e.g. after its own restart.
	if err := e.unprepare(ctx, rule, c); err != nil {
		return "", fmt.Errorf("%w (the second time, the claim being unprepared already)", err)
	}
	return fmt.Sprintf("claim %s unprepared twice", klog.KObj(c)), nil
}

func checkUnknownClaim(ctx context.Context, e *env) (string, error) {
	const rule = "unknown-claim"
	p, err := e.connect(ctx)
	if err != nil {
		return "", err
	}
	ghost := missingClaim(e.s.cfg.Namespace)
	pctx, cancel := context.WithTimeout(ctx, e.s.prepareTimeout)
	resp, err := e.dra.NodePrepareResources(pctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{ref(ghost)}})
	cancel()
	klog.FromContext(ctx).V(1).Info("NodePrepareResources of a missing claim", "claim", klog.KObj(ghost), "response", resp, "err", err)
	var how string
	switch {
	case err != nil && unavailable(err):
		return "", broke(rule, "NodePrepareResources of claim %s, which is not in the API, got no answer: %v", klog.KObj(ghost), err)
	case err != nil:
		// The kubeletplugin helper fails the whole call when it cannot
		// read a claim; the kubelet then fails every claim of the call,
		// which for one claim is the same as failing it.
		how = "failed the call: " + err.Error()
	default:
		got, ok := resp.GetClaims()[string(ghost.UID)]
		switch {
		case !ok || got == nil:
			return "", broke(rule, "NodePrepareResources of claim %s, which is not in the API, answered nothing for the claim instead of an error", klog.KObj(ghost))
		case got.GetError() == "":
			return "", broke(rule, "NodePrepareResources of claim %s, which is not in the API, succeeded with devices %s", klog.KObj(ghost), describeDevices(got.GetDevices()))
		}
		how = "failed the claim: " + got.GetError()
	}
	if _, err := getInfo(ctx, p.socket); err != nil {
		return "", broke(rule, "after preparing claim %s, which is not in the API, the plugin no longer answers GetInfo on %s: %v", klog.KObj(ghost), p.socket, err)
	}
	if err := pingDRA(ctx, e.dra, infoTimeout); err != nil {
		return "", broke(rule, "after preparing claim %s, which is not in the API, the DRA endpoint no longer answers: %v", klog.KObj(ghost), err)
	}
	// The kubelet unprepares claims it is not sure about, among them
	// claims whose preparation failed or never started.
	for _, c := range []*resourceapi.ResourceClaim{ghost, missingClaim(e.s.cfg.Namespace)} {
		if err := e.unprepare(ctx, rule, c); err != nil {
			return "", fmt.Errorf("%w (a claim never prepared)", err)
		}
	}
	return fmt.Sprintf("prepare of missing claim %s %s; unprepare of never-prepared claims succeeded", klog.KObj(ghost), how), nil
}

// missingClaim names a claim that is not in the API: a random name and UID
// never collide with a real claim.
func missingClaim(namespace string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{}
	c.Namespace, c.Name, c.UID = namespace, claimPrefix+"missing-"+rand.String(8), uuid.NewUUID()
	return c
}

func checkConcurrent(ctx context.Context, e *env) (string, error) {
	const rule = "concurrent"
	if _, err := e.connect(ctx); err != nil {
		return "", err
	}
	devs, err := e.freeDevices(ctx, maxConcurrent)
	if err != nil {
		return "", err
	}
	if len(devs) < 2 {
		return "", skipError{reason: fmt.Sprintf("needs at least 2 free devices of driver %s on node %s, found %d", e.s.driver, e.s.cfg.NodeName, len(devs))}
	}
	claims, err := e.newClaims(ctx, devs)
	if err != nil {
		return "", err
	}

	// One call per claim, all at once: the kubelet prepares the claims of
	// different pods in parallel.
	prepared := make([][]*drapb.Device, len(claims))
	err = parallel(len(claims), func(i int) (err error) {
		prepared[i], err = e.prepare(ctx, rule, claims[i])
		return err
	})
	if err != nil {
		return "", err
	}

	ids := make([][]string, len(claims))
	var errs []error
	for i, c := range claims {
		ids[i] = cdiIDs(prepared[i])
		errs = append(errs, e.s.resolveCDI("cdi-ids-resolve", "returned for claim "+klog.KObj(c).String(), ids[i]))
	}
	driverWide, own, err := distinctCDIIDs(rule, claims, ids)
	if err := errors.Join(append(errs, err)...); err != nil {
		return "", err
	}

	err = parallel(len(claims), func(i int) error { return e.unprepare(ctx, rule, claims[i]) })
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("%d claims prepared and unprepared in parallel, %d CDI devices of their own", len(claims), own)
	if len(driverWide) > 0 {
		msg += fmt.Sprintf(", driver-wide %q with every claim", driverWide)
	}
	return msg, nil
}

// distinctCDIIDs requires claims with different devices to get CDI
// devices of their own. An ID returned for every claim, whatever its
// devices, is driver-wide: edits for every container of the node (a GPU
// driver's control device files), legal beside a claim's own IDs. An ID
// returned for some of the claims but not all is neither, and a claim
// whose only IDs are driver-wide gets nothing that tells its devices from
// another claim's. It returns the driver-wide IDs and how many IDs are
// the claims' own.
func distinctCDIIDs(rule string, claims []*resourceapi.ResourceClaim, ids [][]string) (driverWide []string, own int, err error) {
	claimsOf := map[string][]int{}
	for i := range claims {
		for _, id := range slices.Compact(slices.Sorted(slices.Values(ids[i]))) {
			claimsOf[id] = append(claimsOf[id], i)
		}
	}
	ownOf := make([]int, len(claims))
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(claimsOf)) {
		of := claimsOf[id]
		switch {
		case len(of) == len(claims) && len(claims) > 1:
			driverWide = append(driverWide, id)
		case len(of) > 1:
			var with, without []string
			for i, c := range claims {
				if slices.Contains(of, i) {
					with = append(with, klog.KObj(c).String())
				} else {
					without = append(without, klog.KObj(c).String())
				}
			}
			errs = append(errs, broke(rule, "CDI device %q is returned for claims %s, which have different devices, and not for %s: it is neither a claim's own nor driver-wide (returned for every claim)",
				id, strings.Join(with, ", "), strings.Join(without, ", ")))
		default:
			ownOf[of[0]]++
			own++
		}
	}
	for i, c := range claims {
		if ownOf[i] == 0 && len(ids[i]) > 0 {
			errs = append(errs, broke(rule, "claim %s gets no CDI device of its own, only %q, which every claim gets whatever its devices: its container could not tell its device from another claim's", klog.KObj(c), ids[i]))
		}
	}
	return driverWide, own, errors.Join(errs...)
}

// parallel calls f(0) to f(n-1) at once and joins their errors. A panic
// is recovered here, as Run recovers one of the check's own goroutine.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("internal: the check panicked: %v", p)
				}
			}()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func checkRestart(ctx context.Context, e *env) (string, error) {
	const rule = "restart"
	switch {
	case e.s.cfg.Restart == nil:
		return "", skipError{reason: "no Restart function in the sanity Config: the restart check needs a way to restart the driver"}
	case !e.s.restartable:
		return "", skipError{reason: "the manifest says the driver may not be restarted (sanity.restartable: false)", disabled: true}
	}
	c, before, err := e.preparedClaim(ctx)
	if err != nil {
		return "", err
	}
	ids := cdiIDs(before)
	// IDs that never resolved would make the check below blame the restart.
	if err := e.s.resolveCDI("cdi-ids-resolve", "returned for claim "+klog.KObj(c).String(), ids); err != nil {
		return "", err
	}

	klog.FromContext(ctx).V(1).Info("Restarting the driver", "preparedClaim", klog.KObj(c))
	if err := e.s.cfg.Restart(ctx); err != nil {
		return "", broke(setupRule, "the Restart function failed: %v", err)
	}
	if err := e.reconnect(ctx); err != nil {
		return "", broke(rule, "after Restart the driver %v", err)
	}
	// Checked before any new prepare, which could rewrite what was lost:
	// a container of the claim restarting now gets only what survived.
	what := fmt.Sprintf("prepared for claim %s before the restart", klog.KObj(c))
	if err := e.s.resolveCDI(rule, what, ids); err != nil {
		return "", fmt.Errorf("%w; the driver forgot a claim it had prepared: a container of the claim restarting now would start without its device", err)
	}
	again, err := e.prepare(ctx, rule, c)
	if err != nil {
		return "", fmt.Errorf("%w (after the restart)", err)
	}
	if a, b := describeDevices(before), describeDevices(again); a != b {
		return "", broke(rule, "preparing claim %s after the restart returned %s, before it %s", klog.KObj(c), b, a)
	}
	if err := e.unprepare(ctx, rule, c); err != nil {
		return "", fmt.Errorf("%w (after the restart)", err)
	}
	return fmt.Sprintf("claim %s kept %s across the restart", klog.KObj(c), describeDevices(before)), nil
}
