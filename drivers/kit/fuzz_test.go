package kit

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
)

// FuzzParseCheckpoint: a checkpoint file either is ErrCorruptCheckpoint
// naming the file or decodes to a Checkpoint that the driver saves and
// reads back as the same.
func FuzzParseCheckpoint(f *testing.F) {
	// What a driver writes: a claim of every kind of device, and one
	// interrupted while it was being prepared.
	cp := newCheckpoint("gpu.dralab.dev", "node-0")
	cp.Claims["uid-1"] = &PreparedClaim{Namespace: "default", Name: "claim", CDISpec: "gpu.dralab.dev-uid-1.json", Devices: []PreparedDevice{
		{Requests: []string{"gpu"}, Pool: "node-0", Device: "gpu-0", CDIDeviceIDs: []string{"gpu.dralab.dev/gpu=uid-1-gpu-0"}, ConfigEnv: map[string]string{"TIMESLICE": "Short"}},
		{Requests: []string{"mig/small"}, Pool: "node-0", Device: "gpu-1-mig-1g10gb-0", CDIDeviceIDs: []string{"gpu.dralab.dev/gpu=uid-1-gpu-1"},
			State: json.RawMessage(`{"gi":1,"ci":0}`), Env: map[string]string{"A": "1"}, ClaimEnv: map[string]string{"B": "2"}, StatusData: map[string]string{"uuid": "MIG-x"}},
		{Requests: []string{"share"}, Pool: "node-0", Device: "gpu-2", Shared: true, ShareID: "share-1", ConsumedCapacity: map[string]resource.Quantity{"memory": resource.MustParse("7Gi")}},
	}}
	cp.Claims["uid-2"] = &PreparedClaim{Namespace: "default", Name: "half", Preparing: true}
	path := filepath.Join(f.TempDir(), "checkpoint.json")
	if err := cp.save(path); err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	fuzzcheck.AddStrings(f,
		"",
		"null",
		`{"version": "dralab.dev/checkpoint/v1"}`,
		`{"version": "dralab.dev/checkpoint/v1", "claims": {"a": null}}`,
		`{"version": "dralab.dev/checkpoint/v1", "claims": {"a": {"cdiSpec": ""}}}`,
		`{"version": "dralab.dev/checkpoint/v1", "claims": {"a": {"cdiSpec": "a.json", "devices": [{"state": {"gi":1, "ci": [0]}}]}}}`,
		`{"version": "dralab.dev/checkpoint/v2", "driver": "x", "node": "y", "claims": {}}`,
	)
	const source = "/var/lib/fuzz/checkpoint.json"
	parse := func(data []byte) (*Checkpoint, error) { return parseCheckpoint(source, data) }
	// As save writes it.
	encode := func(cp *Checkpoint) ([]byte, error) { return json.MarshalIndent(cp, "", "  ") }
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := fuzzcheck.Check(t, data, source, parse, encode); err != nil && !errors.Is(err, ErrCorruptCheckpoint) {
			t.Fatalf("not ErrCorruptCheckpoint: %v", err)
		}
	})
}
