// Package target decides which cluster the test suites that create and
// delete objects (the conformance suite, e2e) may run on. A lab's own
// kubeconfig (as Request.Lab tells) is fair game; any other cluster only
// when the user names its context in DRALAB_TARGET. A KUBECONFIG that is
// merely set in a shell is not consent: it is usually the cluster someone
// works on.
package target

import (
	"errors"
	"fmt"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
)

// EnvConsent names the kubeconfig context a user allows the suites to run
// on although it is not a dralab lab.
const EnvConsent = "DRALAB_TARGET"

// ErrNoConsent means a kubeconfig points at a cluster that is not a dralab
// lab and the user did not name its context in EnvConsent.
var ErrNoConsent = errors.New("not a dralab lab, and not named in " + EnvConsent)

// Request is what a suite was given.
type Request struct {
	// Kubeconfig is one kubeconfig file; empty: a fresh embedded lab.
	Kubeconfig string
	// Context overrides the kubeconfig's current context (--context).
	Context string
	// Consent is the context the user allows although it is not a lab
	// (the value of EnvConsent).
	Consent string
	// Lab tells whether a kubeconfig file pointing at server is a lab's
	// own, which the suites may use without consent, and returns the lab's
	// state directory. dralab's commands pass the embedded lab's; nil:
	// every cluster needs consent.
	Lab func(kubeconfig, server string) (dir string, ok bool)
}

// Target is a cluster a suite may run on.
type Target struct {
	// Kubeconfig is the file, absolute.
	Kubeconfig string
	// Context and Server are what the kubeconfig points at.
	Context string
	Server  string
	// LabDir is the state directory of the embedded lab whose own
	// kubeconfig this is; empty for a cluster run on by consent.
	LabDir string
}

// String says where a suite runs; a nil Target is a fresh embedded lab.
func (t *Target) String() string {
	if t == nil {
		return "a fresh embedded lab, started and deleted by the run"
	}
	why := "named in " + EnvConsent
	if t.LabDir != "" {
		why = "the dralab lab in " + t.LabDir
	}
	return fmt.Sprintf("context %q at %s (%s; %s)", t.Context, t.Server, t.Kubeconfig, why)
}

// Resolve returns the cluster a suite may run on: nil (a fresh embedded
// lab) without a kubeconfig, the kubeconfig's cluster when it is an
// embedded lab's own or the user consented to its context, else an error
// wrapping ErrNoConsent that names the context, the server and how to
// consent.
func Resolve(r Request) (*Target, error) {
	if r.Kubeconfig == "" {
		if r.Consent != "" {
			return nil, fmt.Errorf("%s=%s names a context, but no kubeconfig is given: set KUBECONFIG to the file that holds it", EnvConsent, r.Consent)
		}
		return nil, nil
	}
	if list := filepath.SplitList(r.Kubeconfig); len(list) > 1 {
		return nil, fmt.Errorf("KUBECONFIG lists %d files (%s): set it to the one file of the cluster to run on", len(list), r.Kubeconfig)
	}
	file, err := filepath.Abs(r.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.LoadFromFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	t := &Target{Kubeconfig: file, Context: cfg.CurrentContext}
	if r.Context != "" {
		t.Context = r.Context
	}
	kctx, ok := cfg.Contexts[t.Context]
	if !ok {
		return nil, fmt.Errorf("kubeconfig %s has no context %q", file, t.Context)
	}
	cluster, ok := cfg.Clusters[kctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("kubeconfig %s: context %q names cluster %q, which it does not define", file, t.Context, kctx.Cluster)
	}
	t.Server = cluster.Server
	if r.Lab != nil {
		if dir, ok := r.Lab(file, t.Server); ok {
			t.LabDir = dir
			return t, nil
		}
	}
	switch r.Consent {
	case t.Context:
		return t, nil
	case "":
		return nil, fmt.Errorf("kubeconfig %s points at context %q (server %s), which is %w: the suite creates and deletes namespaces, claims and DeviceTaintRules there. "+
			"To run on it, set %s=%s; to run on a fresh embedded lab, unset KUBECONFIG", file, t.Context, t.Server, ErrNoConsent, EnvConsent, t.Context)
	default:
		return nil, fmt.Errorf("kubeconfig %s points at context %q (server %s), but %s=%s names another: %w", file, t.Context, t.Server, EnvConsent, r.Consent, ErrNoConsent)
	}
}
