package main

import (
	"context"
	"fmt"

	"github.com/dralab/dralab/charts"
)

// chartLint lints charts/dralab-driver with the Helm SDK (helm lint
// --strict), with its default values and with counting-mode values.
func chartLint(context.Context) error {
	for _, values := range []map[string]any{
		nil,
		{"mode": "device-plugin", "deviceClasses": map[string]any{"create": false}, "validatingAdmissionPolicy": map[string]any{"enabled": false}},
	} {
		msgs, err := charts.Lint("charts/"+charts.DriverChart, values)
		for _, m := range msgs {
			fmt.Println(m)
		}
		if err != nil {
			return err
		}
	}
	fmt.Println("charts/" + charts.DriverChart + ": lint passed")
	return nil
}
