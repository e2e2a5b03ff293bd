// Package docs holds dralab's documentation, and this test, which checks
// that what it tells people to run exists: every mage target named after
// `go run mage.go` or `mage`, every flag of dralab-conformance, and every
// package folder given to `go test`. `go run mage.go docs:check` runs it.
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// documents are the files people read: the README and every page here.
func documents(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md")
	for _, dir := range []string{"../scenarios/*/README.md", "../lab/examples/*.md", "../charts/*/README.md"} {
		more, _ := filepath.Glob(dir)
		files = append(files, more...)
	}
	docs := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(data)
	}
	if len(docs) < 10 {
		t.Fatalf("found %d documents", len(docs))
	}
	return docs
}

// mageTargets are the targets of magefiles, as mage names them: a
// namespace's method ns:method, a function func, in lower case.
func mageTargets(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("../magefiles/*.go")
	if err != nil {
		t.Fatal(err)
	}
	namespaces := map[string]bool{}
	var decls []ast.Decl
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			decls = append(decls, d)
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range g.Specs {
				ts, ok := s.(*ast.TypeSpec)
				if !ok {
					continue
				}
				if sel, ok := ts.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Namespace" {
					namespaces[ts.Name.Name] = true
				}
			}
		}
	}
	targets := map[string]bool{}
	for _, d := range decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || !fn.Name.IsExported() {
			continue
		}
		if fn.Recv == nil {
			targets[strings.ToLower(fn.Name.Name)] = true
			continue
		}
		if id, ok := fn.Recv.List[0].Type.(*ast.Ident); ok && namespaces[id.Name] {
			targets[strings.ToLower(id.Name+":"+fn.Name.Name)] = true
		}
	}
	if !targets["lab:up"] || !targets["test:all"] {
		t.Fatalf("magefiles' targets %v lack lab:up or test:all", targets)
	}
	return targets
}

// A command in the docs may wrap: "go run\nmage.go lab:up".
var (
	mageCommand  = regexp.MustCompile(`go\s+run\s+mage\.go\s+([a-zA-Z][a-zA-Z0-9:]*)|\bmage\s+([a-z]+:[a-zA-Z]+)`)
	toolCommand  = regexp.MustCompile(`dralab-conformance((?:\s+--[a-z-]+(?:[ =](?:"[^"]*"|[^\s` + "`" + `-][^\s` + "`" + `]*))?)+)`)
	toolFlag     = regexp.MustCompile(`--([a-z-]+)`)
	flagDef      = regexp.MustCompile(`fs\.(?:(?:String|Bool|Int|Duration)(?:Var)?|Var)\((?:&[^,]+,\s*)?"([a-z-]+)"`)
	goTestFolder = regexp.MustCompile(`go\s+test\s+(?:-[^\s]+\s+)*(\./[a-zA-Z0-9_/.-]+)`)
)

func TestCommandsInTheDocsExist(t *testing.T) {
	docs := documents(t)
	targets := mageTargets(t)
	src, err := os.ReadFile("../drivers/conformance/cmd/dralab-conformance/main.go")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{"help": true}
	for _, m := range flagDef.FindAllStringSubmatch(string(src), -1) {
		flags[m[1]] = true
	}
	if !flags["manifest"] || !flags["target"] {
		t.Fatalf("dralab-conformance's flags %v lack manifest or target", flags)
	}
	checked := 0
	for _, file := range slices.Sorted(maps.Keys(docs)) {
		text := docs[file]
		for _, m := range mageCommand.FindAllStringSubmatch(text, -1) {
			target := strings.ToLower(m[1] + m[2])
			checked++
			if !targets[target] {
				t.Errorf("%s: %q names no mage target (go run mage.go -l lists them)", file, strings.Join(strings.Fields(m[0]), " "))
			}
		}
		for _, m := range toolCommand.FindAllStringSubmatch(text, -1) {
			for _, f := range toolFlag.FindAllStringSubmatch(m[1], -1) {
				checked++
				if !flags[f[1]] {
					t.Errorf("%s: dralab-conformance has no flag --%s (in %q)", file, f[1], strings.TrimSpace(m[0]))
				}
			}
		}
		for _, m := range goTestFolder.FindAllStringSubmatch(text, -1) {
			dir := strings.TrimSuffix(m[1], "/...")
			checked++
			if !folderIn(dir, "..", "../drivers/conformance") {
				t.Errorf("%s: %q tests %s, which is no folder of the repository", file, strings.TrimSpace(m[0]), dir)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d commands: the patterns no longer match the docs", checked)
	}
	t.Logf("%d commands checked in %d documents", checked, len(docs))
}

// folderIn tells whether dir is a folder under one of the roots.
func folderIn(dir string, roots ...string) bool {
	for _, root := range roots {
		if fi, err := os.Stat(filepath.Join(root, dir)); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}
