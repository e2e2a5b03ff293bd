package charts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/klog/v2"
)

// Install installs (or upgrades) an embedded chart as a release, as
// `helm upgrade --install --wait` would, through the Helm Go SDK.
func Install(ctx context.Context, kubeconfig, chartName, release, namespace string, values map[string]any) error {
	c, err := Load(chartName)
	if err != nil {
		return err
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	cfg := new(action.Configuration)
	logger := klog.FromContext(ctx)
	if err := cfg.Init(flags, namespace, "secret", func(format string, v ...any) { logger.V(2).Info(fmt.Sprintf(format, v...)) }); err != nil {
		return fmt.Errorf("helm: %w", err)
	}
	hist := action.NewHistory(cfg)
	hist.Max = 1
	if _, err := hist.Run(release); err == nil {
		up := action.NewUpgrade(cfg)
		up.Namespace, up.Wait, up.Timeout = namespace, true, 3*time.Minute
		_, err = up.RunWithContext(ctx, release, c, values)
		return err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace, in.Wait, in.Timeout = release, namespace, true, true, 3*time.Minute
	_, err = in.RunWithContext(ctx, c, values)
	if err != nil {
		return fmt.Errorf("installing chart %s as %s: %w", chartName, release, err)
	}
	return nil
}

// Lint lints a chart directory as `helm lint --strict` does, and returns
// its findings; an error means the chart fails.
func Lint(dir string, values map[string]any) ([]string, error) {
	l := action.NewLint()
	l.Strict = true
	res := l.Run([]string{dir}, values)
	var out []string
	for _, m := range res.Messages {
		out = append(out, m.Error())
	}
	if len(res.Errors) > 0 {
		return out, fmt.Errorf("chart %s: %w", dir, errors.Join(res.Errors...))
	}
	return out, nil
}
