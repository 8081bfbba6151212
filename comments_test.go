package redlock_test

// This file checks the house rules for the library's source: short comment
// sentences, no function over 80 lines, one receiver name per type. The
// library is every non-test .go file of this module outside cmd/, plus the
// embedded Lua scripts, whose "--" comments count with the "//" ones.
// Nested modules (bench/, fencesql/internal/sqltest) are not the library.

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The limits. A sentence is long at longWords words or more.
const (
	maxAvgWords  = 16.0
	longWords    = 40
	maxLongShare = 0.04
	maxFuncLines = 80
)

// enforced lists the package directories whose numbers must meet the
// limits: every package of the library. A new package is added here.
var enforced = []string{
	".",
	"chanapi",
	"coordinator",
	"fencesql",
	"internal/argerr",
	"internal/clockstep",
	"internal/engine",
	"internal/guard",
	"internal/redisproc",
	"internal/scripts",
	"internal/testkit",
	"nodeactor",
	"notify",
	"primitives",
	"testutil",
}

// sentence is one sentence of a comment.
type sentence struct {
	pos   string // file:line where it starts
	words int
	text  string
}

// pkgStats holds the numbers of one package directory.
type pkgStats struct {
	dir       string
	sentences []sentence
	longFuncs map[string]string   // dir.Func -> "file:line: N lines", over maxFuncLines
	receivers map[string][]string // type name -> receiver names, sorted
}

func (p *pkgStats) words() int {
	n := 0
	for _, s := range p.sentences {
		n += s.words
	}
	return n
}

func (p *pkgStats) long() int {
	n := 0
	for _, s := range p.sentences {
		if s.words >= longWords {
			n++
		}
	}
	return n
}

// receiverClashes returns "Type: a, b" for each type with more than one
// receiver name.
func (p *pkgStats) receiverClashes() []string {
	var out []string
	for typ, names := range p.receivers {
		if len(names) > 1 {
			out = append(out, p.dir+"."+typ+": "+strings.Join(names, ", "))
		}
	}
	slices.Sort(out)
	return out
}

func TestCommentsAndFiles(t *testing.T) {
	pkgs := libraryPackages(t)
	isEnforced := make(map[string]bool)
	for _, d := range enforced {
		isEnforced[d] = true
	}
	var all, enf []sentence
	var problems []string
	t.Logf("%-22s %9s %8s %6s", "package", "sentences", "words/s", "40+ %")
	for _, p := range pkgs {
		mark := ""
		if isEnforced[p.dir] {
			mark = " (enforced)"
			enf = append(enf, p.sentences...)
			for name, where := range p.longFuncs {
				problems = append(problems, fmt.Sprintf("function over %d lines: %s (%s): cut it by concept", maxFuncLines, name, where))
			}
			for _, c := range p.receiverClashes() {
				problems = append(problems, "more than one receiver name: "+c)
			}
		} else {
			for _, c := range p.receiverClashes() {
				t.Logf("more than one receiver name (not enforced yet): %s", c)
			}
		}
		all = append(all, p.sentences...)
		avg, share := averages(p.sentences)
		t.Logf("%-22s %9d %8.1f %6.1f%s", p.dir, len(p.sentences), avg, 100*share, mark)
	}
	avg, share := averages(all)
	t.Logf("library: %d sentences, %.1f words a sentence, %.1f %% of %d words or more", len(all), avg, 100*share, longWords)
	avg, share = averages(enf)
	t.Logf("enforced packages: %d sentences, %.1f words a sentence, %.1f %% of %d words or more", len(enf), avg, 100*share, longWords)
	if avg > maxAvgWords {
		problems = append(problems, fmt.Sprintf("enforced packages: %.1f words a sentence on average, want at most %.0f", avg, maxAvgWords))
	}
	if share > maxLongShare {
		problems = append(problems, fmt.Sprintf("enforced packages: %.1f %% of sentences have %d words or more, want at most %.0f %%", 100*share, longWords, 100*maxLongShare))
	}

	worst := slices.Clone(all)
	slices.SortStableFunc(worst, func(a, b sentence) int { return cmp.Compare(b.words, a.words) })
	t.Log("the 20 longest sentences:")
	for _, s := range worst[:min(20, len(worst))] {
		t.Logf("  %3d words  %s  %.70s...", s.words, s.pos, s.text)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// averages returns the mean words per sentence and the share of long
// sentences.
func averages(ss []sentence) (avg, longShare float64) {
	if len(ss) == 0 {
		return 0, 0
	}
	words, long := 0, 0
	for _, s := range ss {
		words += s.words
		if s.words >= longWords {
			long++
		}
	}
	return float64(words) / float64(len(ss)), float64(long) / float64(len(ss))
}

// libraryPackages walks the module and measures every package directory
// of the library.
func libraryPackages(t *testing.T) []*pkgStats {
	t.Helper()
	byDir := make(map[string]*pkgStats)
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || path == "cmd") {
				return filepath.SkipDir
			}
			if path != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a nested module
				}
			}
			return nil
		}
		isGo := strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go")
		isLua := strings.HasSuffix(path, ".lua")
		if !isGo && !isLua {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		p := byDir[dir]
		if p == nil {
			p = &pkgStats{dir: dir, receivers: make(map[string][]string), longFuncs: make(map[string]string)}
			byDir[dir] = p
		}
		path = filepath.ToSlash(path)
		if isLua {
			p.sentences = append(p.sentences, luaSentences(path, string(src))...)
			return nil
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, g := range f.Comments {
			var ls []commentLine
			for _, c := range g.List {
				if strings.HasPrefix(c.Text, "//") {
					ls = append(ls, commentLine{fset.Position(c.Slash).Line, c.Text[2:]})
				}
			}
			p.sentences = append(p.sentences, sentences(path, ls)...)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if ok && fd.Body != nil {
				from, to := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
				if n := to - from + 1; n > maxFuncLines {
					name := dir + "." + fd.Name.Name
					if fd.Recv != nil && len(fd.Recv.List) > 0 {
						name = dir + "." + receiverType(fd.Recv.List[0].Type) + "." + fd.Name.Name
					}
					p.longFuncs[name] = fmt.Sprintf("%s:%d: %d lines", path, from, n)
				}
			}
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 || len(fd.Recv.List[0].Names) == 0 {
				continue
			}
			name := fd.Recv.List[0].Names[0].Name
			typ := receiverType(fd.Recv.List[0].Type)
			if name != "_" && !slices.Contains(p.receivers[typ], name) {
				p.receivers[typ] = append(p.receivers[typ], name)
				slices.Sort(p.receivers[typ])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []*pkgStats
	for _, p := range byDir {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *pkgStats) int { return cmp.Compare(a.dir, b.dir) })
	return out
}

// receiverType names the type of a receiver: T for T, *T, T[K] and *T[K].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return fmt.Sprintf("%T", e)
		}
	}
}

// commentLine is one comment line without its comment marker.
type commentLine struct {
	line int
	text string
}

// luaSentences measures the "--" comments of a Lua script. Consecutive
// comment lines form one block, as "//" lines do in Go. The "-- use:" and
// "-- part:" lines are directives for the prelude (scripts.WithPrelude).
// Lua has no code blocks in comments: a line indented by two spaces or
// more is a list item, and a line indented deeper than the item above it
// continues that item.
func luaSentences(path, src string) []sentence {
	var out []sentence
	var block []commentLine
	item := -1 // indent of the list item being read, or -1
	for i, l := range strings.Split(src, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), "--")
		text := strings.TrimSpace(rest)
		if ok && !strings.HasPrefix(text, "use:") && !strings.HasPrefix(text, "part:") {
			indent := len(rest) - len(strings.TrimLeft(rest, " \t"))
			switch {
			case indent < 2:
				item = -1
			case item < 0 || indent <= item:
				item = indent
				text = "- " + strings.TrimPrefix(text, "- ")
			}
			block = append(block, commentLine{i + 1, " " + text})
			continue
		}
		out = append(out, sentences(path, block)...)
		block, item = nil, -1
	}
	return append(out, sentences(path, block)...)
}

var (
	// directive matches //go:embed, //nolint:... and the like.
	directive = regexp.MustCompile(`^[a-z0-9]+:|^line `)
	// listItem matches a doc comment's list marker.
	listItem = regexp.MustCompile(`^\s*([-*+•]|\d+[.)])\s+`)
	// sentenceEnd matches the end of a sentence inside a line.
	sentenceEnd = regexp.MustCompile(`[.!?]+["')\]]*(\s+|$)`)
	// abbrev matches abbreviations whose period ends no sentence.
	abbrev = regexp.MustCompile(`\b(e\.g|i\.e|vs|cf|etc)\.(\s+[a-z(])`)
	// word matches a token that is a word: it has a letter or a digit.
	word = regexp.MustCompile(`[\p{L}\p{N}]`)
)

// sentences splits one comment block into sentences. A blank line, a list
// item and a code line (indented by a tab or two spaces, a directive) end
// the sentence before them; code lines are not measured.
func sentences(path string, block []commentLine) []sentence {
	var out []sentence
	var cur sentence
	var text []string
	flush := func() {
		if cur.words > 0 {
			cur.text = strings.Join(text, " ")
			out = append(out, cur)
		}
		cur, text = sentence{}, nil
	}
	add := func(line int, s string) {
		for _, f := range strings.Fields(s) {
			if word.MatchString(f) {
				if cur.words == 0 {
					cur.pos = fmt.Sprintf("%s:%d", path, line)
				}
				cur.words++
			}
			text = append(text, f)
		}
	}
	for _, l := range block {
		s := l.text
		item := listItem.MatchString(s)
		switch {
		case directive.MatchString(s), strings.TrimSpace(s) == "":
			flush()
			continue
		case item:
			flush()
			s = listItem.ReplaceAllString(s, "")
		case strings.HasPrefix(s, "\t") || strings.HasPrefix(s, "  "):
			flush()
			continue
		}
		s = abbrev.ReplaceAllString(s, "${1}_$2")
		for {
			loc := sentenceEnd.FindStringIndex(s)
			if loc == nil {
				add(l.line, s)
				break
			}
			add(l.line, s[:loc[1]])
			flush()
			s = s[loc[1]:]
		}
	}
	flush()
	return out
}

func TestSentences(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  []int // words of each sentence
	}{
		{"two sentences on one line", []string{" One two. Three four five."}, []int{2, 3}},
		{"a sentence across lines", []string{" One two", " three four."}, []int{4}},
		{"a blank line ends a sentence", []string{" One two", "", " three"}, []int{2, 1}},
		{"code lines are not prose", []string{" Use it:", "\tx := f(a, b)", " Then go."}, []int{2, 2}},
		{"directives are skipped", []string{"go:embed *.lua"}, nil},
		{"list items are sentences", []string{" Kinds:", "  - one thing", "  - another thing"}, []int{1, 2, 2}},
		{"an abbreviation ends nothing", []string{" Some, e.g. this one."}, []int{4}},
		{"a dotted name ends nothing", []string{" See lock.lua and x.go now."}, []int{5}},
		{"a symbol is no word", []string{" a → b."}, []int{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var block []commentLine
			for i, l := range tt.lines {
				block = append(block, commentLine{i + 1, l})
			}
			var got []int
			for _, s := range sentences("x.go", block) {
				got = append(got, s.words)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("sentences(%q) = %v, want %v", tt.lines, got, tt.want)
			}
		})
	}
}

func TestLuaSentences(t *testing.T) {
	src := `-- One two. Three
-- four.
-- use: clock now
-- KEYS:
--   1 lock
--   2 fence counter, kept
--     as long as needed
local x = 1 -- not a comment line
-- part: head
-- head is here.`
	var got []int
	for _, s := range luaSentences("x.lua", src) {
		got = append(got, s.words)
	}
	if want := []int{2, 2, 1, 2, 8, 3}; !slices.Equal(got, want) {
		t.Errorf("luaSentences = %v, want %v", got, want)
	}
}
