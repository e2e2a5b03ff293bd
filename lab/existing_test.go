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
	// A kind lab named by a configuration of the default backend is the
	// kind lab its creation recorded: lab:down without DRALAB_BACKEND=kind
	// deletes its kind cluster, not only its state.
	kindLab := smallConfig("on-kind", "n1")
	kindLab.Backend = config.BackendKind
	if err := kindLab.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "on-kind"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := kindLab.Record(filepath.Join(root, "on-kind", "config.json")); err != nil {
		t.Fatal(err)
	}
	asGiven := filepath.Join(t.TempDir(), "on-kind.yaml")
	if err := os.WriteFile(asGiven, []byte("apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nname: on-kind\nnodes: [{name: n1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(lab.EnvConfig, asGiven)
	t.Setenv(lab.EnvBackend, "")
	if l, err := lab.Existing(at); err != nil || l.Backend() != config.BackendKind {
		t.Errorf("Existing with DRALAB_CONFIG of a kind lab, no DRALAB_BACKEND = %v, %v; want the recorded kind lab", l, err)
	}
	t.Setenv(lab.EnvConfig, "")
	if err := os.RemoveAll(filepath.Join(root, "on-kind")); err != nil {
		t.Fatal(err)
	}

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
