// Package target decides which cluster the test suites that create and
// delete objects (the conformance suite, e2e) may run on. A lab's own
// kubeconfig (as Request.Lab tells) is fair game; any other cluster only
// when the user names its context and server in DRALAB_TARGET. A KUBECONFIG that is
// merely set in a shell is not consent: it is usually the cluster someone
// works on.
package target

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/homedir"
)

// EnvConsent names the kubeconfig context, and the server it points at
// (context@server, see Consent), that a user allows the suites to run on
// although it is not a dralab lab.
const EnvConsent = "DRALAB_TARGET"

// ErrNoConsent means a kubeconfig points at a cluster that is not a dralab
// lab and the user did not name its context in EnvConsent.
var ErrNoConsent = errors.New("not a dralab lab, and not named in " + EnvConsent)

// Request is what a suite was given.
type Request struct {
	// Kubeconfig is a kubeconfig file, or a list of them as KUBECONFIG
	// holds one (merged as kubectl merges them); empty: a fresh embedded
	// lab.
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
	// Kubeconfig is the file, absolute, or the list of Files.
	Kubeconfig string
	// Files are the kubeconfig files, absolute, merged in this order.
	Files []string
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
	var files []string
	for _, f := range filepath.SplitList(r.Kubeconfig) {
		if f == "" {
			continue
		}
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, err
		}
		files = append(files, abs)
	}
	t := &Target{Kubeconfig: strings.Join(files, string(filepath.ListSeparator)), Files: files}
	cfg, err := t.LoadingRules().Load()
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	file := t.Kubeconfig
	t.Context = cfg.CurrentContext
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
		for _, f := range t.Files {
			if dir, ok := r.Lab(f, t.Server); ok {
				t.LabDir = dir
				return t, nil
			}
		}
	}
	consent := Consent(t.Context, t.Server)
	ctxName, server, bound := splitConsent(r.Consent)
	switch {
	case r.Consent == consent:
		return t, nil
	case r.Consent == "":
		return nil, fmt.Errorf("kubeconfig %s points at context %q (server %s), which is %w: the suite creates and deletes namespaces, claims and DeviceTaintRules there. "+
			"To run on it, set %s=%s; to run on a fresh embedded lab, unset KUBECONFIG", file, t.Context, t.Server, ErrNoConsent, EnvConsent, consent)
	case !bound && ctxName == t.Context:
		return nil, fmt.Errorf("%s=%s names the context %q but not its server: consent names both, so that it cannot carry over to another cluster whose context has that name: %w. "+
			"To run on this one, set %s=%s", EnvConsent, r.Consent, t.Context, ErrNoConsent, EnvConsent, consent)
	case ctxName == t.Context:
		return nil, fmt.Errorf("kubeconfig %s: context %q points at server %s, but %s=%s consents to %s: %w", file, t.Context, t.Server, EnvConsent, r.Consent, server, ErrNoConsent)
	default:
		return nil, fmt.Errorf("kubeconfig %s points at context %q (server %s), but %s=%s names another: %w", file, t.Context, t.Server, EnvConsent, r.Consent, ErrNoConsent)
	}
}

// Consent is the value of EnvConsent that allows the suites to run on a
// cluster: its context and its server, "kind-kind@https://127.0.0.1:39871".
func Consent(context, server string) string { return context + "@" + server }

// splitConsent splits a consent into its context and server; bound is
// false for a bare context.
func splitConsent(consent string) (context, server string, bound bool) {
	for _, scheme := range []string{"@https://", "@http://"} {
		if i := strings.LastIndex(consent, scheme); i >= 0 {
			return consent[:i], consent[i+1:], true
		}
	}
	return consent, "", false
}

// LoadingRules load the Target's kubeconfig as kubectl does: one file must
// exist; of a list, the files that exist are merged, the first to set a
// value winning.
func (t *Target) LoadingRules() *clientcmd.ClientConfigLoadingRules {
	if len(t.Files) == 1 {
		return &clientcmd.ClientConfigLoadingRules{ExplicitPath: t.Files[0]}
	}
	return &clientcmd.ClientConfigLoadingRules{Precedence: t.Files}
}

// ClientConfig is the Target's kubeconfig, at its Context.
func (t *Target) ClientConfig() clientcmd.ClientConfig {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(t.LoadingRules(), &clientcmd.ConfigOverrides{CurrentContext: t.Context})
}

// DefaultKubeconfig is where kubectl finds its kubeconfig without
// --kubeconfig: $KUBECONFIG (a file or a list), else ~/.kube/config when it
// exists; "" when neither is there.
func DefaultKubeconfig() string {
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		return env
	}
	// clientcmd.RecommendedHomeFile, read now rather than when the
	// program started.
	home := filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)
	if _, err := os.Stat(home); err == nil {
		return home
	}
	return ""
}
