package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
)

// TestWalkthroughOutputs compares the outputs docs/walkthrough.md shows for
// its commands that are not scenarios (the scenarios' outcomes are their
// scenario.yaml's) with what the suite's lab prints for them: lab:status's
// node table, and kubectl get resourceslices and deviceclasses, whose
// tables the API server makes and kubectl's own printer prints. "…" in the
// document stands for any text.
func TestWalkthroughOutputs(t *testing.T) {
	requireCluster(t)
	if theLab == nil {
		t.Skip("compares the walkthrough with the default lab, which the suite starts: against --kubeconfig the cluster is another")
	}
	data, err := os.ReadFile("../docs/walkthrough.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	ctx := context.Background()
	restConfig, err := theLab.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("lab:status", func(t *testing.T) {
		st, err := theLab.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := st.WriteNodes(&got); err != nil {
			t.Fatal(err)
		}
		compareOutput(t, outputOf(t, doc, "go run mage.go lab:status"), got.String())
	})
	t.Run("kubectl get resourceslices, deviceclasses", func(t *testing.T) {
		var got bytes.Buffer
		for _, resource := range []string{"resourceslices", "deviceclasses"} {
			raw, err := client.ResourceV1().RESTClient().Get().Resource(resource).
				SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var table metav1.Table
			if err := json.Unmarshal(raw, &table); err != nil {
				t.Fatal(err)
			}
			if err := printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(&table, &got); err != nil {
				t.Fatal(err)
			}
		}
		compareOutput(t, outputOf(t, doc, "kubectl get deviceclasses"), got.String())
	})
}

// outputOf returns the output block that follows the sh block holding
// command in a Markdown document.
func outputOf(t *testing.T, doc, command string) string {
	t.Helper()
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```\n\n```\n(.*?)```").FindAllStringSubmatch(doc, -1)
	for _, b := range blocks {
		for _, line := range strings.Split(b[1], "\n") {
			if strings.TrimSpace(line) == command {
				return b[2]
			}
		}
	}
	t.Fatalf("no output block after a block with %q", command)
	return ""
}

// compareOutput compares printed lines with a document's, line by line
// (lineMatches).
func compareOutput(t *testing.T, want, got string) {
	t.Helper()
	wantLines, gotLines := lines(want), lines(got)
	var diffs []string
	for i := range max(len(wantLines), len(gotLines)) {
		var w, g string
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if !lineMatches(w, g) {
			diffs = append(diffs, fmt.Sprintf("line %d: the document shows %q, the lab prints %q", i+1, w, g))
		}
	}
	if len(diffs) > 0 {
		t.Errorf("docs/walkthrough.md does not show what the lab prints:\n%s\n\nthe lab prints:\n%s", strings.Join(diffs, "\n"), got)
	}
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// lineMatches matches a printed line against a document's: the same
// words, any run of spaces for one, "…" for any text (a pid, a restart
// count: "running (pid …)" matches "running (pid 5131, 1 restarts)").
func lineMatches(want, got string) bool {
	var re strings.Builder
	re.WriteString("^")
	for i, word := range strings.Fields(want) {
		if i > 0 {
			re.WriteString(`\s+`)
		}
		parts := strings.Split(word, "…")
		for j := range parts {
			parts[j] = regexp.QuoteMeta(parts[j])
		}
		re.WriteString(strings.Join(parts, ".+"))
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(strings.TrimSpace(got))
}
