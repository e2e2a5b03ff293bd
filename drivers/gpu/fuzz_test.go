package gpu

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	sigsjson "sigs.k8s.io/json"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/strictyaml"
)

// FuzzConfigure: a GPUConfig's opaque parameters either fail naming
// GPUConfig (and, when they decode, the field) or give the variables of
// the configuration they hold. Configure returns variables, not the
// Config, so the round trip is of those: the GPUConfig written from the
// variables gives the same variables.
func FuzzConfigure(f *testing.F) {
	for _, file := range []string{"../fakegpu/driver.yaml", "../nvml/driver.yaml"} {
		m, err := manifest.Load(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(m.OpaqueConfig.Valid))
		f.Add([]byte(m.OpaqueConfig.Invalid))
	}
	fuzzcheck.AddStrings(f,
		"",
		"null",
		"{}",
		`{"apiVersion": "gpu.dralab.dev/v1alpha1", "kind": "GPUConfig"}`,
		`{"apiVersion": "gpu.dralab.dev/v1alpha1", "kind": "GPUConfig", "timeSlicing": null}`,
		`{"apiVersion": "gpu.dralab.dev/v1alpha1", "kind": "GPUConfig", "timeSlicing": {"interval": "Long", "interval": "Short"}}`,
		`{"apiVersion": "gpu.dralab.dev/v1alpha1", "kind": "GPUConfig", "timeslicing": {}}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		var env map[string]string
		var err error
		fuzzcheck.Promptly(func() { env, err = Configure(data) })
		if err != nil {
			fuzzcheck.NamesSource(t, err, ConfigKind)
			var c Config
			if strict, err2 := sigsjson.UnmarshalStrict(data, &c); err2 == nil && len(strict) == 0 &&
				!strings.Contains(err.Error(), "apiVersion") && !strings.Contains(err.Error(), "timeSlicing.interval") {
				t.Fatalf("parameters that decode fail without naming the field: %v", err)
			}
			return
		}
		c := Config{APIVersion: ConfigAPIVersion, Kind: ConfigKind}
		for k, v := range env {
			if k != "TIMESLICE" {
				t.Fatalf("unknown variable %s=%s", k, v)
			}
			c.TimeSlicing = &TimeSlicing{Interval: v}
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		fuzzcheck.Same(t, env, again, Configure)
	})
}

// FuzzParseFaults: a GPU faults file either fails naming the file (and the
// field of a bad XID) or gives the failed GPUs, which UpdateFaults writes
// and parseFaults reads back as the same.
func FuzzParseFaults(f *testing.F) {
	const source = "/var/lib/fuzz/gpu-faults.json"
	seed, err := UpdateFaults(source, nil, func(g map[string]GPUFault) { g["gpu-0"] = GPUFault{XID: 79}; g["gpu-10"] = GPUFault{XID: 48} })
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	fuzzcheck.AddStrings(f,
		"",
		"# only a comment\n",
		"apiVersion: gpu.dralab.dev/v1alpha1\nkind: GPUFaults\ngpus: {}\n",
		"apiVersion: gpu.dralab.dev/v1alpha1\nkind: GPUFaults\n",
		"apiVersion: gpu.dralab.dev/v1alpha1\nkind: GPUFaults\ngpus: {gpu-0: {xid: 0}}\n",
		"apiVersion: gpu.dralab.dev/v1alpha1\nkind: GPUFaults\ngpus: {gpu-0: null}\n",
	)
	parse := func(data []byte) (map[string]GPUFault, error) { return parseFaults(source, data) }
	f.Fuzz(func(t *testing.T, data []byte) {
		var gpus map[string]GPUFault
		var err error
		fuzzcheck.Promptly(func() { gpus, err = parse(data) })
		if err != nil {
			fuzzcheck.NamesSource(t, err, source)
			if strictyaml.Decode(data, &Faults{}) == nil && !strings.Contains(err.Error(), "apiVersion") && !strings.Contains(err.Error(), "].xid") {
				t.Fatalf("a faults file that decodes fails without naming the field: %v", err)
			}
			return
		}
		again, err := UpdateFaults(source, nil, func(g map[string]GPUFault) { maps.Copy(g, gpus) })
		if err != nil {
			t.Fatal(err)
		}
		if again == nil {
			if len(gpus) != 0 {
				t.Fatalf("faults %v written as no file", gpus)
			}
			return
		}
		fuzzcheck.Same(t, gpus, again, parse)
	})
}
