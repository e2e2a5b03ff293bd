// Package charts embeds dralab's Helm charts so that the lab installs them
// through the Helm Go SDK (Helm v4, see docs/helm.md) from the binary, and
// tests render them without a helm binary.
package charts

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
)

//go:embed all:dralab-driver
var files embed.FS

// DriverChart is the GPU driver's chart.
const DriverChart = "dralab-driver"

// Load loads an embedded chart.
func Load(name string) (*chart.Chart, error) {
	var bufs []*archive.BufferedFile
	err := fs.WalkDir(files, name, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		bufs = append(bufs, &archive.BufferedFile{Name: strings.TrimPrefix(path, name+"/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return loader.LoadFiles(bufs)
}

// Render renders a chart with values as `helm template` would: the values
// are checked against values.schema.json first, and a validation template
// that fails makes the whole render fail. The result maps template paths
// to manifests.
func Render(c *chart.Chart, values map[string]any, namespace string) (map[string]string, error) {
	opts := common.ReleaseOptions{Name: "dralab", Namespace: namespace, Revision: 1, IsInstall: true}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *KubeVersion
	vals, err := util.ToRenderValues(c, values, opts, caps)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", c.Name(), err)
	}
	out, err := engine.Render(c, vals)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", c.Name(), err)
	}
	return out, nil
}

// KubeVersion is the Kubernetes version charts are rendered and linted for:
// the lab's.
var KubeVersion = func() *common.KubeVersion {
	v, err := common.ParseKubeVersion("v1.37.2")
	if err != nil {
		panic(err)
	}
	return v
}()

// Lint lints a chart directory as `helm lint --strict --kube-version
// v1.37.2` does (Helm's chart linter, warnings fail), and returns its
// findings; an error means the chart fails.
func Lint(dir string, values map[string]any) ([]string, error) {
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	linter := lint.RunAll(dir, values, "default", lint.WithKubeVersion(KubeVersion))
	var out []string
	var errs []error
	for _, m := range linter.Messages {
		out = append(out, m.Error())
		if m.Severity >= support.WarningSev {
			errs = append(errs, m.Err)
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("chart %s: %w", dir, errors.Join(errs...))
	}
	return out, nil
}
