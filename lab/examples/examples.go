// Package examples holds the example lab configurations, embedded so that the
// default lab needs no file on disk and every example is validated by tests.
package examples

import "embed"

// FS holds every example configuration, by file name.
//
//go:embed *.yaml
var FS embed.FS

// DefaultFile is the configuration a lab uses when none is named.
const DefaultFile = "default.yaml"
