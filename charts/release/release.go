// Package release installs dralab's embedded charts as Helm releases
// through the Helm v4 SDK's actions. It is apart from package charts,
// which renders and lints, because the actions bring in Helm's plugin
// runtime (a WebAssembly engine): only what installs pays for it.
package release

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/charts"
)

// installTimeout bounds an install or upgrade and its wait for the
// release's resources to be ready.
const installTimeout = 3 * time.Minute

// Install installs (or upgrades) an embedded chart as a release, as
// `helm upgrade --install --wait --rollback-on-failure` would, through the
// Helm Go SDK: a release that does not become ready is uninstalled (a
// first install) or rolled back (an upgrade), never left half applied.
// Helm's own log goes to ctx's logger at verbosity 2.
func Install(ctx context.Context, kubeconfig, chartName, release, namespace string, values map[string]any) error {
	c, err := charts.Load(chartName)
	if err != nil {
		return err
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(logr.ToSlogHandler(klog.FromContext(ctx).V(2))))
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		return fmt.Errorf("helm: %w", err)
	}
	hist := action.NewHistory(cfg)
	hist.Max = 1
	_, err = hist.Run(release)
	switch {
	case err == nil:
		up := action.NewUpgrade(cfg)
		up.Namespace, up.WaitStrategy, up.Timeout, up.RollbackOnFailure = namespace, kube.StatusWatcherStrategy, installTimeout, true
		if _, err := up.RunWithContext(ctx, release, c, values); err != nil {
			return fmt.Errorf("upgrading release %s of chart %s: %w", release, chartName, err)
		}
		return nil
	case !errors.Is(err, driver.ErrReleaseNotFound):
		return fmt.Errorf("reading the history of release %s: %w", release, err)
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = release, namespace, true
	in.WaitStrategy, in.Timeout, in.RollbackOnFailure = kube.StatusWatcherStrategy, installTimeout, true
	if _, err := in.RunWithContext(ctx, c, values); err != nil {
		return fmt.Errorf("installing chart %s as %s: %w", chartName, release, err)
	}
	return nil
}
