package redlock_test

// The Go snippets of README.md and docs/guide.md are quoted from the
// runnable examples (example_test.go and *_example_test.go of each public
// package, and of fencesql's database tests in fencesql/internal/sqltest),
// so they compile and run: these tests fail when a snippet no longer
// appears in an example file.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/redlock-go/redlock/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testutil.WatchStalls(m), testutil.LeakOptions()...)
}

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// snippets returns the ```go blocks of a Markdown text.
func snippets(md string) []string {
	var out []string
	for _, m := range goBlock.FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

// lines splits src into lines with their indentation and trailing space
// removed, so that a snippet quoted at another nesting depth still matches.
func lines(src string) []string {
	ls := strings.Split(strings.TrimRight(src, "\n"), "\n")
	for i, l := range ls {
		ls[i] = strings.TrimSpace(l)
	}
	return ls
}

// quoted reports whether every line of snippet appears, in order and
// contiguous, in src (both compared without indentation).
func quoted(snippet, src string) bool {
	want, have := lines(snippet), lines(src)
	for i := 0; i+len(want) <= len(have); i++ {
		if equal(have[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// exampleFiles returns the text of every example file of the public
// packages: */example_test.go and */*_example_test.go.
func exampleFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pat := range []string{"*/example_test.go", "*/*_example_test.go"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	// and the examples of fencesql's database tests (a module of their own)
	more, err := filepath.Glob("*/internal/*/example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, more...)
	var examples []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		examples = append(examples, string(b))
	}
	if len(examples) < 4 {
		t.Fatalf("found %d example files (%v), want one per public package", len(examples), files)
	}
	return examples
}

// checkSnippets fails for each Go snippet of the Markdown file md that no
// example file quotes; min is the fewest snippets the file must have.
func checkSnippets(t *testing.T, md string, min int) {
	t.Helper()
	text, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	examples := exampleFiles(t)
	snips := snippets(string(text))
	if len(snips) < min {
		t.Fatalf("found %d Go snippets in %s, want at least %d: is the parser broken?", len(snips), md, min)
	}
	for _, s := range snips {
		found := false
		for _, e := range examples {
			if quoted(s, e) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s snippet not found in any example file (update the example and quote it):\n%s", md, s)
		}
	}
}

func TestReadmeSnippetsAreExamples(t *testing.T) {
	t.Parallel()
	checkSnippets(t, "README.md", 3)
}

// The freeze test runs README's leader snippet as written: a change to the
// snippet must reach chanapi/freeze_test.go's helper too.
func TestReadmeLeaderSnippetIsTheFreezeTests(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	helper, err := os.ReadFile("chanapi/freeze_test.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range snippets(string(readme)) {
		if !strings.Contains(s, "lead(lease.Context())") {
			continue
		}
		n++
		if !quoted(s, string(helper)) {
			t.Errorf("README's leader snippet is not quoted in chanapi/freeze_test.go's helper:\n%s", s)
		}
	}
	if n != 1 {
		t.Errorf("found %d leader snippets in README.md, want 1", n)
	}
}

func TestGuideSnippetsAreExamples(t *testing.T) {
	t.Parallel()
	checkSnippets(t, "docs/guide.md", 6)
}

func TestQuoted(t *testing.T) {
	t.Parallel()
	src := "func ExampleX() {\n\tf := func() error {\n\t\tx, err := f()\n\t\tif err != nil {\n\t\t\treturn err\n\t\t}\n\t\treturn use(x)\n\t}\n}\n"
	for _, tc := range []struct {
		snippet string
		want    bool
	}{
		{"x, err := f()\nif err != nil {\n\treturn err\n}\n", true},
		{"return use(x)\n", true},
		{"x, err := f()\nreturn use(x)\n", false},               // not contiguous
		{"x, err := g()\nif err != nil {\n", false},             // a changed line
		{"if err != nil {\n\treturn err\n}\nreturn y\n", false}, // runs past the quote
		{"return use(x)\n}\n}\nmore\n", false},                  // runs past the end
	} {
		if got := quoted(tc.snippet, src); got != tc.want {
			t.Errorf("quoted(%q) = %v, want %v", tc.snippet, got, tc.want)
		}
	}
	if n := len(snippets("text\n```go\na := 1\n```\n```sh\nls\n```\n```go\nb\n```\n")); n != 2 {
		t.Errorf("snippets found %d Go blocks, want 2", n)
	}
}
