package labstate

import (
	"os"
	"testing"
	"time"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
	"github.com/dralab/dralab/internal/procid"
)

// statusSeeds writes a status, a PID and an owner file as a lab does, and
// returns the directory.
func statusSeeds(f *testing.F) Dir {
	d := Dir(f.TempDir())
	self, err := procid.Self()
	if err != nil {
		f.Fatal(err)
	}
	child := procid.ID{PID: 4242, StartTime: 77, BootID: self.BootID, Executable: "/usr/local/bin/dralab"}
	s := &Status{Phase: "Running", Message: "up", ID: self, ConfigHash: "0123abcd", APIServer: "https://127.0.0.1:6443",
		StartedAt: time.Date(2026, 12, 1, 18, 0, 0, 123, time.FixedZone("", 3600)),
		Processes: []ProcessStatus{{Role: RoleNode, Node: "gpu-h100", ID: child, Running: true}, {Role: RoleDriver, Node: "gpu-h100", ID: child, Restarts: 2, Exit: "exit status 1"}}}
	if err := d.WriteStatus(s); err != nil {
		f.Fatal(err)
	}
	if err := d.WriteOwner(self); err != nil {
		f.Fatal(err)
	}
	return d
}

// FuzzParseStatus: a status file either fails naming the file or decodes
// to a Status that WriteStatus writes and ReadStatus reads back as the
// same.
func FuzzParseStatus(f *testing.F) {
	d := statusSeeds(f)
	fuzzcheck.AddFiles(f, d.StatusFile())
	fuzzcheck.AddStrings(f, "", "null", "{}", `{"startedAt": "2026-13-01T00:00:00Z"}`, `{"pid": -1, "processes": [null]}`, `{"startedAt": "9999-12-31T23:59:59-23:59"}`)
	source := d.StatusFile()
	f.Fuzz(func(t *testing.T, data []byte) {
		var s *Status
		var err error
		fuzzcheck.Promptly(func() { s, err = parseStatus(source, data) })
		if err != nil {
			fuzzcheck.NamesSource(t, err, source)
			return
		}
		out := Dir(t.TempDir())
		if err := out.WriteStatus(s); err != nil {
			t.Fatalf("a decoded status does not write: %v", err)
		}
		again, err := os.ReadFile(out.StatusFile())
		if err != nil {
			t.Fatal(err)
		}
		fuzzcheck.Same(t, s, again, func(data []byte) (*Status, error) { return parseStatus(source, data) })
	})
}

// FuzzParseProcessID: a PID or owner file either fails naming the file or
// holds a process (a positive PID) that WriteOwner writes and ReadOwner
// reads back as the same.
func FuzzParseProcessID(f *testing.F) {
	d := statusSeeds(f)
	fuzzcheck.AddFiles(f, d.OwnerFile())
	fuzzcheck.AddStrings(f, "", "null", "1234", `{"pid": 0}`, `{"pid": 1e3}`, `{"pid": 1, "startTime": -1}`)
	source := d.OwnerFile()
	parse := func(data []byte) (procid.ID, error) { return parseProcessID(source, data) }
	f.Fuzz(func(t *testing.T, data []byte) {
		var id procid.ID
		var err error
		fuzzcheck.Promptly(func() { id, err = parse(data) })
		if err != nil {
			fuzzcheck.NamesSource(t, err, source)
			return
		}
		if id.PID <= 0 {
			t.Fatalf("PID %d accepted", id.PID)
		}
		out := Dir(t.TempDir())
		if err := out.WriteOwner(id); err != nil {
			t.Fatal(err)
		}
		again, err := os.ReadFile(out.OwnerFile())
		if err != nil {
			t.Fatal(err)
		}
		fuzzcheck.Same(t, id, again, parse)
	})
}
