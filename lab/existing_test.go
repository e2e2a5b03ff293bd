package lab_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// recordLab leaves the state a lab records when it is created: its
// configuration, in its own directory of the state root.
func recordLab(t *testing.T, root, name string) {
	t.Helper()
	cfg := smallConfig(name, "n1")
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Record(filepath.Join(root, name, "config.json")); err != nil {
		t.Fatal(err)
	}
}

// TestExistingLab: commands acting on an existing lab act on the only one,
// on the one DRALAB_LAB or DRALAB_CONFIG names, and with several and none
// named, name them all and how to choose, instead of acting on the default
// lab and leaving the others running.
func TestExistingLab(t *testing.T) {
	t.Setenv(lab.EnvLab, "")
	t.Setenv(lab.EnvConfig, "")
	root := t.TempDir()
	at := lab.WithStateRoot(root)

	l, err := lab.Existing(at)
	if err != nil || l.Config().Name != config.DefaultName {
		t.Fatalf("Existing without labs = %v, %v; want the default lab", l, err)
	}

	recordLab(t, root, "workshop")
	l, err = lab.Existing(at)
	if err != nil || l.Config().Name != "workshop" || l.Kubeconfig() != filepath.Join(root, "workshop", "kubeconfig") {
		t.Fatalf("Existing with one lab = %v, %v; want lab workshop", l, err)
	}

	recordLab(t, root, "bench")
	if err := os.MkdirAll(filepath.Join(root, "not-a-lab"), 0o700); err != nil {
		t.Fatal(err)
	}
	if names, err := lab.Names(at); err != nil || strings.Join(names, ",") != "bench,workshop" {
		t.Errorf("Names = %v, %v; want bench, workshop", names, err)
	}
	_, err = lab.Existing(at)
	if !errors.Is(err, lab.ErrAmbiguous) || !strings.Contains(err.Error(), "bench, workshop") || !strings.Contains(err.Error(), "DRALAB_LAB=bench") {
		t.Errorf("Existing with two labs = %v; want ErrAmbiguous naming both and DRALAB_LAB", err)
	}

	t.Setenv(lab.EnvLab, "workshop")
	if l, err := lab.Existing(at); err != nil || l.Config().Name != "workshop" {
		t.Errorf("Existing with DRALAB_LAB=workshop = %v, %v", l, err)
	}
	t.Setenv(lab.EnvLab, "gone")
	if _, err := lab.Existing(at); !errors.Is(err, lab.ErrNoSuchLab) || !strings.Contains(err.Error(), "bench, workshop") {
		t.Errorf("Existing with DRALAB_LAB=gone = %v; want ErrNoSuchLab naming the labs there are", err)
	}

	t.Setenv(lab.EnvLab, "")
	t.Setenv(lab.EnvConfig, filepath.Join(root, "bench", "config.json"))
	if l, err := lab.Existing(at); err != nil || l.Config().Name != "bench" {
		t.Errorf("Existing with DRALAB_CONFIG = %v, %v; want bench", l, err)
	}
	t.Setenv(lab.EnvConfig, "")

	labs, err := lab.List(context.Background(), at)
	if err != nil || len(labs) != 2 {
		t.Fatalf("List = %v, %v; want two labs", labs, err)
	}
	for _, st := range labs {
		// Their state was only recorded: no lab process runs.
		if st.Backend != config.BackendEmbedded || st.Phase != "Failed" {
			t.Errorf("listed %s: backend %s, phase %s", st.Name, st.Backend, st.Phase)
		}
	}
}
