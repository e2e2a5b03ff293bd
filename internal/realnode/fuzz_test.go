package realnode

import (
	"os"
	"testing"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
	"github.com/dralab/dralab/internal/labstate"
)

// FuzzParseHostRecord: a node's host record either fails naming the file
// or decodes to a HostRecord that Write writes and ReadHostRecord reads
// back as the same.
func FuzzParseHostRecord(f *testing.F) {
	p := Paths{Node: labstate.NodeDir(f.TempDir())}
	rec := &HostRecord{Lab: "dralab", CgroupRoot: "/dralab-dralab", CgroupDirs: []string{"/sys/fs/cgroup/dralab-dralab"}, Bridge: BridgeName,
		ChainsBefore: []string{"filter/INPUT"}, ChainsCreated: []string{"filter/KUBE-FIREWALL"}, ChainsRecorded: true,
		PathsBefore: []string{"/var/lib/kubelet"}, PathsCreated: []string{"/var/lib/kubelet/device-plugins"}}
	if err := rec.Write(p); err != nil {
		f.Fatal(err)
	}
	fuzzcheck.AddFiles(f, p.HostRecordFile())
	fuzzcheck.AddStrings(f, "", "null", "{}", `{"cgroupDirs": null, "chainsRecorded": "yes"}`)
	source := p.HostRecordFile()
	parse := func(data []byte) (*HostRecord, error) { return parseHostRecord(source, data) }
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec *HostRecord
		var err error
		fuzzcheck.Promptly(func() { rec, err = parse(data) })
		if err != nil {
			fuzzcheck.NamesSource(t, err, source)
			return
		}
		out := Paths{Node: labstate.NodeDir(t.TempDir())}
		if err := rec.Write(out); err != nil {
			t.Fatal(err)
		}
		again, err := os.ReadFile(out.HostRecordFile())
		if err != nil {
			t.Fatal(err)
		}
		fuzzcheck.Same(t, rec, again, parse)
	})
}
