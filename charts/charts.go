// Package charts embeds dralab's Helm charts so that the lab installs them
// through the Helm Go SDK (Helm v3, see docs/helm.md) from the binary, and
// tests render them without a helm binary.
package charts

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

//go:embed all:dralab-driver
var files embed.FS

// DriverChart is the GPU driver's chart.
const DriverChart = "dralab-driver"

// Load loads an embedded chart.
func Load(name string) (*chart.Chart, error) {
	var bufs []*loader.BufferedFile
	err := fs.WalkDir(files, name, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		bufs = append(bufs, &loader.BufferedFile{Name: strings.TrimPrefix(path, name+"/"), Data: data})
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
	opts := chartutil.ReleaseOptions{Name: "dralab", Namespace: namespace, Revision: 1, IsInstall: true}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
	vals, err := chartutil.ToRenderValues(c, values, opts, caps)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", c.Name(), err)
	}
	out, err := engine.Render(c, vals)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", c.Name(), err)
	}
	return out, nil
}
