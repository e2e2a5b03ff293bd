// Package sanity is layer 1 of dralab's DRA driver conformance suite: it
// checks any DRA driver's kubelet plugin on one node by calling it over
// gRPC exactly as the kubelet does, through the plugin registration socket
// and the DRA socket, without pods, a scheduler or a container runtime.
//
// Like csi-test's sanity package it is a Go library first: a driver's own
// tests call Test(t, cfg), a conformance runner calls Run and reports the
// results. Because NodePrepareResources makes the plugin read the claim from
// the API server, each check creates its own ResourceClaims and writes their
// allocation itself, with devices taken from the driver's ResourceSlices on
// the node, as Kubernetes' node e2e tests do. Every check cleans up what it
// created, also when it fails.
package sanity

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Config says which driver to check and where it lives on the node.
type Config struct {
	// Manifest is the driver's manifest: its name, DeviceClass, prepare
	// timeout and whether it may be restarted.
	Manifest *manifest.Manifest
	// Client reaches the API server the driver reads claims from; the
	// checks create their claims through it.
	Client kubernetes.Interface
	// NodeName is the node whose kubelet plugin is checked.
	NodeName string
	// RegistrarDir is the kubelet's plugins_registry directory on the node,
	// where the driver's registration socket is.
	RegistrarDir string
	// CDIDir is the CDI spec directory the node's container runtime reads.
	CDIDir string
	// Namespace is where test claims are created; it must exist.
	// Default: "default".
	Namespace string
	// Restart restarts the driver and returns once it has been asked to;
	// the restart check then waits for the driver to register again. An
	// old instance still answering cannot be told from a new one, so a
	// Restart that returns only once the old instance stopped serving
	// makes a stronger check. ctx is the check's: a driver started
	// in-process must not be bound to it. Nil leaves the restart check
	// unverified.
	Restart func(ctx context.Context) error
	// AllowUnverified reports a check that cannot be made here (no
	// Restart, too few free devices) as skipped, with a warning, instead
	// of failed. A check the manifest disables is skipped either way.
	AllowUnverified bool
}

// Result is what one check found.
type Result struct {
	// Check is the check's stable name, e.g. "cdi-ids-resolve".
	Check string
	// Rule is what the check requires of the driver, in words.
	Rule   string
	Status results.Status
	// Message says what happened. A failure's message starts with the name
	// of the rule the driver broke, which is not always the check's own:
	// the concurrent check fails with "cdi-ids-resolve: …" when a CDI ID
	// does not resolve. A skip's message is the reason: the manifest
	// disables what it checks, or it starts with results.UnverifiedPrefix.
	Message string
	Elapsed time.Duration
}

// Check is one sanity check.
type Check struct {
	// Name is a stable identifier, usable to select or report a check.
	Name string
	// Rule is what the check requires of the driver, in words.
	Rule string

	run func(context.Context, *env) (string, error)
}

// Checks returns every check in the order Run runs them.
func Checks() []Check {
	return []Check{
		{Name: "registration", Rule: "a socket in the kubelet's plugin registry answers GetInfo with type DRAPlugin, the driver's name, an endpoint that exists and answers, and the DRA v1 service among its supported versions", run: checkRegistration},
		{Name: "prepare", Rule: "NodePrepareResources of an allocated claim succeeds within the prepare timeout and returns at least one device for the claim's request, each with the allocated pool and device", run: checkPrepare},
		{Name: "cdi-ids-resolve", Rule: "every CDI device ID NodePrepareResources returns is a qualified CDI name (vendor/class=name) that resolves in the node's CDI spec directory", run: checkCDIIDsResolve},
		{Name: "prepare-idempotent", Rule: "preparing an already prepared claim succeeds and returns the same devices and CDI IDs", run: checkPrepareIdempotent},
		{Name: "unprepare-idempotent", Rule: "NodeUnprepareResources succeeds for a prepared claim, and again for the claim once unprepared", run: checkUnprepareIdempotent},
		{Name: "unknown-claim", Rule: "NodePrepareResources of a claim missing from the API fails for that claim and leaves the plugin answering; NodeUnprepareResources of a never-prepared claim succeeds", run: checkUnknownClaim},
		{Name: "concurrent", Rule: "claims prepared in parallel calls, each with its own device, all succeed, each with CDI IDs of its own that no other claim gets (an ID returned with every claim is driver-wide and allowed beside them), all resolving, and unprepare in parallel", run: checkConcurrent},
		{Name: "restart", Rule: "after a restart the driver registers again, the CDI IDs of the claims it had prepared still resolve, preparing them again returns the same IDs, and unpreparing them succeeds", run: checkRestart},
	}
}

// Run runs every check in order and returns one result per check. A
// misbehaving driver fails checks; it never makes Run panic.
func Run(ctx context.Context, cfg Config) []Result {
	s, err := newSession(cfg)
	var out []Result
	for _, c := range Checks() {
		if err != nil {
			out = append(out, Result{Check: c.Name, Rule: c.Rule, Status: results.Failed, Message: err.Error()})
			continue
		}
		out = append(out, s.run(ctx, c))
	}
	return out
}

// Test runs every check as a subtest of t: a failing check fails its
// subtest with "rule: message", a skipped one is skipped with the reason.
func Test(t *testing.T, cfg Config) {
	t.Helper()
	s, err := newSession(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Checks() {
		t.Run(c.Name, func(t *testing.T) {
			r := s.run(t.Context(), c)
			switch r.Status {
			case results.Failed:
				t.Error(r.Message)
			case results.Skipped:
				t.Skip(r.Message)
			default:
				t.Log(r.Message)
			}
		})
	}
}

// session is a validated Config with its defaults applied.
type session struct {
	cfg Config
	// driver and the rest copy the manifest's fields the checks use.
	driver, class  string
	prepareTimeout time.Duration
	restartable    bool
}

// errConfig marks a Config that cannot be used; every check fails with it,
// since nothing about the driver was learnt.
var errConfig = errors.New("setup: invalid sanity config")

func newSession(cfg Config) (*session, error) {
	var errs []error
	if cfg.Manifest == nil {
		errs = append(errs, errors.New("no Manifest"))
	} else if cfg.Manifest.Driver == "" || cfg.Manifest.DeviceClass == "" {
		errs = append(errs, errors.New("the Manifest names no driver or no DeviceClass"))
	}
	if cfg.Client == nil {
		errs = append(errs, errors.New("no Client"))
	}
	for what, v := range map[string]string{"NodeName": cfg.NodeName, "RegistrarDir": cfg.RegistrarDir, "CDIDir": cfg.CDIDir} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is empty", what))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", errConfig, errors.Join(errs...))
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	s := &session{
		cfg:            cfg,
		driver:         cfg.Manifest.Driver,
		class:          cfg.Manifest.DeviceClass,
		prepareTimeout: cfg.Manifest.Timeouts.Prepare,
		restartable:    cfg.Manifest.Sanity.Restartable,
	}
	// A Manifest built in code rather than parsed has no defaults.
	if s.prepareTimeout <= 0 {
		s.prepareTimeout = manifest.DefaultPrepareTimeout
	}
	return s, nil
}

// run runs one check with its own environment and cleans up after it. A
// panic, in the check or in a client library fed a strange answer, becomes
// the check's failure rather than ending the whole run.
func (s *session) run(ctx context.Context, c Check) (r Result) {
	r = Result{Check: c.Name, Rule: c.Rule}
	logger := klog.LoggerWithName(klog.FromContext(ctx), c.Name)
	ctx = klog.NewContext(ctx, logger)
	start := time.Now()
	e := &env{s: s, prepared: map[types.UID]*resourceapi.ResourceClaim{}}
	defer func() {
		if p := recover(); p != nil {
			r.Status, r.Message = results.Failed, fmt.Sprintf("internal: the check panicked: %v", p)
		}
		if err := e.cleanup(ctx); err != nil {
			if r.Status == results.Failed {
				r.Message += "; cleaning up also failed: " + err.Error()
			} else {
				// A check that passed but left a prepared claim behind
				// still broke a rule: unpreparing must work.
				r.Status, r.Message = results.Failed, err.Error()
			}
		}
		r.Elapsed = time.Since(start)
		logger.V(1).Info("Check done", "status", r.Status, "message", r.Message, "elapsed", r.Elapsed)
	}()
	if err := ctx.Err(); err != nil {
		r.Status, r.Message = results.Failed, fmt.Sprintf("%s: not run: %v", setupRule, context.Cause(ctx))
		return r
	}
	msg, err := c.run(ctx, e)
	var skip skipError
	switch {
	case errors.As(err, &skip) && skip.disabled:
		r.Status, r.Message = results.Skipped, skip.reason
	case errors.As(err, &skip):
		r.Status, r.Message = results.Unverified(s.cfg.AllowUnverified, skip.reason)
	case err != nil:
		r.Status, r.Message = results.Failed, err.Error()
	default:
		r.Status, r.Message = results.Passed, msg
	}
	return r
}

// ruleError is a broken rule: its message starts with the rule's name, so
// that a reader sees which rule the driver broke.
type ruleError struct {
	rule string
	msg  string
}

func (e *ruleError) Error() string { return e.rule + ": " + e.msg }

// broke reports that the driver broke rule.
func broke(rule, format string, args ...any) error {
	return &ruleError{rule: rule, msg: fmt.Sprintf(format, args...)}
}

// setupRule names failures of the test's own setup (the API server, the
// Restart function): nothing was learnt about the driver, but nothing was
// checked either, so they fail rather than skip.
const setupRule = "setup"

// skipError is a check not made, with the reason: skipped when the manifest
// disables what it checks, else not verified (a failure unless
// Config.AllowUnverified).
type skipError struct {
	reason   string
	disabled bool
}

func (e skipError) Error() string { return e.reason }
