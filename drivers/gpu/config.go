package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	sigsjson "sigs.k8s.io/json"
)

// The driver's opaque configuration, given in a DeviceClass's or a claim's
// spec.config[].opaque with driver gpu.dralab.dev:
//
//	{"apiVersion": "gpu.dralab.dev/v1alpha1", "kind": "GPUConfig", "timeSlicing": {"interval": "Short"}}
const (
	ConfigAPIVersion = "gpu.dralab.dev/v1alpha1"
	ConfigKind       = "GPUConfig"
)

// Config is the driver's configuration of the devices it applies to.
type Config struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// TimeSlicing shares a GPU between the processes of the containers
	// using it in turns, as NVIDIA's driver does.
	TimeSlicing *TimeSlicing `json:"timeSlicing,omitempty"`
}

// TimeSlicing sets the length of a GPU's time slices.
type TimeSlicing struct {
	// Interval is Default, Short, Medium or Long.
	Interval string `json:"interval"`
}

// TimeSliceIntervals are the intervals a TimeSlicing may name.
var TimeSliceIntervals = []string{"Default", "Short", "Medium", "Long"}

// Configure implements kit.Options.Configure: a prepared GPU shows its
// configuration as GPU_DEVICE_<n>_TIMESLICE. Unknown fields, another kind or
// version, and bad values are errors naming the field.
func Configure(parameters []byte) (map[string]string, error) {
	var c Config
	strict, err := sigsjson.UnmarshalStrict(parameters, &c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ConfigKind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", ConfigKind, errors.Join(strict...))
	}
	if c.APIVersion != ConfigAPIVersion || c.Kind != ConfigKind {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want %s, %s", c.APIVersion, c.Kind, ConfigAPIVersion, ConfigKind)
	}
	env := map[string]string{}
	if ts := c.TimeSlicing; ts != nil {
		if !slices.Contains(TimeSliceIntervals, ts.Interval) {
			return nil, fmt.Errorf("%s: timeSlicing.interval %q: want one of %s", ConfigKind, ts.Interval, strings.Join(TimeSliceIntervals, ", "))
		}
		env["TIMESLICE"] = ts.Interval
	}
	return env, nil
}
