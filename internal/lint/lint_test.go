package lint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// tableDoc is where the package table lives, relative to the module root.
const tableDoc = "docs/ARCHITECTURE.md"

// thirdParty maps the words the "may import" column uses for third-party
// dependencies to the import paths each allows (the path and every package
// below it). A word that is not here fails the test: add it here, with the
// narrowest paths that cover what the code uses.
var thirdParty = map[string][]string{
	"kmsg":        {"github.com/twmb/franz-go/pkg/kmsg"},
	"kerr":        {"github.com/twmb/franz-go/pkg/kerr"},
	"kbin":        {"github.com/twmb/franz-go/pkg/kbin"},
	"kgo":         {"github.com/twmb/franz-go/pkg/kgo"},
	"kadm":        {"github.com/twmb/franz-go/pkg/kadm"},
	"sasl":        {"github.com/twmb/franz-go/pkg/sasl"},
	"pebble":      {"github.com/cockroachdb/pebble/v2"},
	"prometheus":  {"github.com/prometheus/client_golang"},
	"protobuf":    {"google.golang.org/protobuf"},
	"grpc":        {"google.golang.org/grpc"},
	"etcd client": {"go.etcd.io/etcd/client/v3", "go.etcd.io/etcd/api/v3"},
	"etcd server": {"go.etcd.io/etcd/server/v3"},
	"zap":         {"go.uber.org/zap"},
	"btree":       {"github.com/google/btree"},
	"x/sys":       {"golang.org/x/sys"},
	"x/sync":      {"golang.org/x/sync"},
	"cobra":       {"github.com/spf13/cobra"},
	"pflag":       {"github.com/spf13/pflag"},
	"yaml":        {"sigs.k8s.io/yaml"},
	"porcupine":   {"github.com/anishathalye/porcupine"},
	"jwt":         {"github.com/golang-jwt/jwt/v5"},
	// pulsar-client-go: tests and interop/ only, never the server binary.
	"pulsar-client-go": {"github.com/apache/pulsar-client-go"},
}

// standardLibrary is the "may import" cell of a package that imports
// nothing but the standard library.
const standardLibrary = "standard library"

// plannedMark opens the "owns" cell of a row for a package not written yet.
const plannedMark = "*(planned)*"

// corePackage names the files of a package that are a deterministic state
// machine (core) and those that drive it (shell). Every non-test file of the
// directory must be one or the other, so that a new file is classified on
// purpose rather than escaping the check.
type corePackage struct {
	dir   string   // relative to the module root
	core  []string // no clocks, goroutines, channels, locks or I/O
	shell []string // the same package's driver; not checked
}

// cores are the protocol state machines. Their shells (ledgerclient,
// mlogclient) are separate packages; the consumer group keeps its shell,
// the Coordinator, in the same package.
var cores = []corePackage{
	{
		dir:  "internal/ledger",
		core: []string{"messages.go", "metadata.go", "placement.go", "reader.go", "recovery.go", "writer.go"},
	},
	{
		dir: "internal/mlog",
		core: []string{"cursor.go", "cursor_codec.go", "cursor_ledger.go", "maint.go", "managed_ledger.go",
			"policy.go", "position.go", "rangeset.go", "record.go", "types.go"},
	},
	{
		// The whole package is core: its shell (the on-disk log, the
		// fetchers, the etcd controller) is the next issue's.
		dir: "internal/isr",
		core: []string{"controller.go", "doc.go", "election.go", "follower.go", "invariants.go", "leader.go",
			"log.go", "memlog.go", "reassign.go", "replica.go", "state.go", "types.go"},
	},
	{
		// offsets.go is core: Group methods that take the time as an
		// argument and return OffsetWrites for the shell to persist.
		dir:   "internal/kafka/group",
		core:  []string{"admin.go", "group.go", "membership.go", "offsets.go", "txnoffsets.go"},
		shell: []string{"coordinator.go", "coordinator_txn.go"},
	},
	{
		// The transaction coordinator: the core, and its shell on the
		// metadata store (service.go).
		dir:   "internal/kafka/txn",
		core:  []string{"coordinator.go", "doc.go", "types.go"},
		shell: []string{"kafka.go", "service.go"},
	},
	{
		// Client quotas: entities, precedence and the rate core take the
		// time as an argument; the metadata store's copy is the shell.
		dir:   "internal/quota",
		core:  []string{"quota.go", "rate.go"},
		shell: []string{"store.go"},
	},
}

// coreForbiddenImports are the packages a core file must not import, with
// why.
var coreForbiddenImports = map[string]string{
	"net":         "sockets belong to the shell",
	"net/http":    "sockets belong to the shell",
	"os":          "files and processes belong to the shell",
	"os/exec":     "processes belong to the shell",
	"os/signal":   "signals belong to the shell",
	"syscall":     "system calls belong to the shell",
	"sync":        "one goroutine owns a core, so it needs no locks",
	"sync/atomic": "one goroutine owns a core, so it needs no atomics",
	"context":     "deadlines and cancellation are the shell's; the core gets the time as an input",
	"crypto/rand": "no seed replays it; randomness comes in as an input",
	"log":         "a core reports events in Ready; the shell logs them",
	"log/slog":    "a core reports events in Ready; the shell logs them",
}

// coreForbiddenTime are the functions of package time a core file must not
// use (time.Time and time.Duration are fine: the time comes in as input).
var coreForbiddenTime = map[string]string{
	"Now":       "reads the clock",
	"Since":     "reads the clock",
	"Until":     "reads the clock",
	"Sleep":     "blocks",
	"After":     "starts a timer",
	"AfterFunc": "starts a timer",
	"Tick":      "starts a ticker",
	"NewTimer":  "starts a timer",
	"NewTicker": "starts a ticker",
}

// row is one row of the package table.
type row struct {
	pkg       string // relative to the module root: "internal/ledger"
	line      int    // 1-based, in the document
	planned   bool
	mayImport string   // the cell as written, for messages
	internal  []string // "internal/meta", or "internal/mlog/..." for a subtree
	external  []string // third-party import path prefixes
}

// fileMap is the parsed package table.
type fileMap struct {
	rows  []row
	byPkg map[string]int // index into rows
}

var (
	backticked = regexp.MustCompile("^`([A-Za-z0-9_./-]+)`$")
	separator  = regexp.MustCompile(`^:?-+:?$`)
)

// cells splits a Markdown table line into its trimmed cells; ok is false
// when the line is not a table line.
func cells(line string) (out []string, ok bool) {
	line = strings.TrimSpace(line)
	if len(line) < 2 || !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil, false
	}
	for _, c := range strings.Split(line[1:len(line)-1], "|") {
		out = append(out, strings.TrimSpace(c))
	}
	return out, true
}

// splitEntries splits a "may import" cell on the commas that are outside
// parentheses and backticks.
func splitEntries(cell string) []string {
	var out []string
	depth, quoted, start := 0, false, 0
	for i, r := range cell {
		switch {
		case r == '`':
			quoted = !quoted
		case quoted:
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ',' && depth == 0:
			out = append(out, strings.TrimSpace(cell[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(cell[start:]))
}

// isSeparator reports whether lines[i] is a table's |---|---|---| line.
func isSeparator(lines []string, i int) bool {
	if i >= len(lines) {
		return false
	}
	c, ok := cells(lines[i])
	if !ok || len(c) != 3 {
		return false
	}
	for _, cell := range c {
		if !separator.MatchString(cell) {
			return false
		}
	}
	return true
}

// validPattern reports whether p is a package path or a subtree
// ("internal/mlog/...").
func validPattern(p string) bool {
	base := strings.TrimSuffix(p, "/...")
	return base != "" && !strings.Contains(base, "...") && !strings.HasPrefix(base, "/") &&
		!strings.HasSuffix(base, "/") && !strings.Contains(base, "//")
}

// parseTable finds the `| package | owns | may import |` table in doc and
// parses every row. Problems are what makes the table unreadable; whether it
// is true is checkTable's and checkImports' business.
func parseTable(doc string) (fileMap, []string) {
	fm := fileMap{byPkg: map[string]int{}}
	var problems []string
	lines := strings.Split(doc, "\n")
	header := -1
	for i, l := range lines {
		if c, ok := cells(l); ok && slices.Equal(c, []string{"package", "owns", "may import"}) {
			header = i
			break
		}
	}
	if header < 0 {
		return fm, []string{"no package table: want a header line | package | owns | may import |"}
	}
	if !isSeparator(lines, header+1) {
		return fm, []string{fmt.Sprintf("line %d: the package table's header is not followed by |---|---|---|", header+2)}
	}
	for i := header + 2; i < len(lines); i++ {
		c, ok := cells(lines[i])
		if !ok {
			break
		}
		line := i + 1
		if len(c) != 3 {
			problems = append(problems, fmt.Sprintf("line %d: want 3 cells (package, owns, may import), got %d", line, len(c)))
			continue
		}
		m := backticked.FindStringSubmatch(c[0])
		if m == nil {
			problems = append(problems, fmt.Sprintf("line %d: package cell %q is not one backticked path", line, c[0]))
			continue
		}
		r := row{pkg: m[1], line: line, mayImport: c[2], planned: strings.HasPrefix(c[1], plannedMark)}
		if strings.TrimSpace(strings.TrimPrefix(c[1], plannedMark)) == "" {
			problems = append(problems, fmt.Sprintf("line %d: `%s` says nothing about what it owns", line, r.pkg))
		}
		entries := splitEntries(c[2])
		for _, e := range entries {
			head := e
			if open := strings.Index(e, "("); open >= 0 {
				if !strings.HasSuffix(e, ")") {
					problems = append(problems, fmt.Sprintf("line %d: `%s` may import %q: text after a note in parentheses", line, r.pkg, e))
				}
				head = strings.TrimSpace(e[:open])
			}
			if m := backticked.FindStringSubmatch(head); m != nil {
				if !validPattern(m[1]) {
					problems = append(problems, fmt.Sprintf("line %d: `%s` may import %q: not a package path or path/...", line, r.pkg, head))
					continue
				}
				r.internal = append(r.internal, m[1])
				continue
			}
			if head == standardLibrary {
				if len(entries) > 1 {
					problems = append(problems, fmt.Sprintf("line %d: `%s`: %q stands alone; the standard library is always allowed", line, r.pkg, standardLibrary))
				}
				continue
			}
			if paths, ok := thirdParty[head]; ok {
				r.external = append(r.external, paths...)
				continue
			}
			problems = append(problems, fmt.Sprintf("line %d: `%s` may import %q: not a backticked package path, %q, or a dependency named in thirdParty (%s)",
				line, r.pkg, head, standardLibrary, strings.Join(sortedKeys(thirdParty), ", ")))
		}
		if prev, dup := fm.byPkg[r.pkg]; dup {
			problems = append(problems, fmt.Sprintf("line %d: `%s` has a row already, at line %d", line, r.pkg, fm.rows[prev].line))
			continue
		}
		fm.byPkg[r.pkg] = len(fm.rows)
		fm.rows = append(fm.rows, r)
	}
	return fm, problems
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// matches reports whether the module-relative package path rel is pattern
// or, for "base/...", base or a package below it.
func matches(pattern, rel string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

// checkTable checks that the table is true of the module, whose packages
// (relative to the module root) are pkgs: every row names a package (or is
// planned and does not exist yet), and every package a row may import is a
// row below it, so imports point down the table and cannot form a cycle.
func checkTable(fm fileMap, pkgs map[string]bool) []string {
	var problems []string
	for i, r := range fm.rows {
		switch {
		case !pkgs[r.pkg] && !r.planned:
			problems = append(problems, fmt.Sprintf("line %d: row `%s` names no package of the module: remove the row, or mark it %s", r.line, r.pkg, plannedMark))
		case pkgs[r.pkg] && r.planned:
			problems = append(problems, fmt.Sprintf("line %d: `%s` exists now: remove %s from its row", r.line, r.pkg, plannedMark))
		}
		for _, p := range r.internal {
			found := false
			for j, other := range fm.rows {
				if !matches(p, other.pkg) {
					continue
				}
				found = true
				if j <= i {
					problems = append(problems, fmt.Sprintf("line %d: `%s` may import `%s`, but row `%s` (line %d) is not below it: imports point down the table",
						r.line, r.pkg, p, other.pkg, other.line))
				}
			}
			if !found {
				problems = append(problems, fmt.Sprintf("line %d: `%s` may import `%s`, which names no row of the table", r.line, r.pkg, p))
			}
		}
	}
	return problems
}

// goPackage is what checkImports needs of `go list -json`.
type goPackage struct {
	ImportPath string
	Imports    []string
	Error      *struct{ Err string }
}

// checkImports checks every package of module (its non-test imports) against
// the table: a package may import the standard library and what its row
// lists, nothing else, and every package needs a row.
func checkImports(module string, fm fileMap, pkgs []goPackage) []string {
	var problems []string
	for _, p := range pkgs {
		rel, ok := relative(module, p.ImportPath)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is not in module %s", p.ImportPath, module))
			continue
		}
		i, ok := fm.byPkg[rel]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is not in the package table: add a row saying what it owns and what it may import", rel))
			continue
		}
		r := fm.rows[i]
		for _, imp := range p.Imports {
			allowed := false
			if irel, ok := relative(module, imp); ok {
				allowed = slices.ContainsFunc(r.internal, func(pattern string) bool { return matches(pattern, irel) })
			} else if isStandard(imp) {
				allowed = true
			} else {
				allowed = slices.ContainsFunc(r.external, func(prefix string) bool {
					return imp == prefix || strings.HasPrefix(imp, prefix+"/")
				})
			}
			if !allowed {
				problems = append(problems, fmt.Sprintf("%s imports %s, which its row (line %d) does not allow; it may import: %s",
					rel, imp, r.line, r.mayImport))
			}
		}
	}
	return problems
}

// relative returns path relative to the module root, if it is in module.
func relative(module, path string) (string, bool) {
	if path == module {
		return ".", true
	}
	rest, ok := strings.CutPrefix(path, module+"/")
	return rest, ok
}

// isStandard reports whether path (not in the module) is in the standard
// library: its first element has no dot, which every module path outside
// it has.
func isStandard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// classify checks that the directory's non-test Go files are exactly the
// package's core and shell files, and returns the core files to check.
func classify(cp corePackage, names []string) (coreFiles []string, problems []string) {
	present := map[string]bool{}
	for _, n := range names {
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") ||
			strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
			continue
		}
		present[n] = true
		switch {
		case slices.Contains(cp.core, n):
			coreFiles = append(coreFiles, n)
		case slices.Contains(cp.shell, n):
		default:
			problems = append(problems, fmt.Sprintf("%s/%s is neither a core nor a shell file: add it to cores in internal/lint/lint_test.go "+
				"(a core file reads no clock, starts no goroutine and does no I/O)", cp.dir, n))
		}
	}
	for _, n := range append(slices.Clone(cp.core), cp.shell...) {
		if !present[n] {
			problems = append(problems, fmt.Sprintf("%s/%s is listed in cores in internal/lint/lint_test.go but does not exist", cp.dir, n))
		}
	}
	return coreFiles, problems
}

// checkCoreFile reports what in one parsed core file is not deterministic:
// forbidden imports, clock and timer functions of package time (under any
// import name), go and select statements, and channel types.
func checkCoreFile(fset *token.FileSet, f *ast.File) []string {
	var problems []string
	report := func(n ast.Node, format string, args ...any) {
		pos := fset.Position(n.Pos())
		problems = append(problems, fmt.Sprintf("%s:%d: ", pos.Filename, pos.Line)+fmt.Sprintf(format, args...))
	}
	timeNames := map[string]bool{}
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			report(imp, "bad import path %s", imp.Path.Value)
			continue
		}
		if why, bad := coreForbiddenImports[path]; bad {
			report(imp, "imports %q: %s", path, why)
		}
		if path != "time" {
			continue
		}
		switch {
		case imp.Name == nil:
			timeNames["time"] = true
		case imp.Name.Name == ".":
			report(imp, `dot-imports "time", which hides clock reads from this check`)
		case imp.Name.Name != "_":
			timeNames[imp.Name.Name] = true
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			report(n, "go statement: a core starts no goroutines; it returns work in Ready")
		case *ast.SelectStmt:
			report(n, "select statement: a core never waits; inputs arrive as method calls")
		case *ast.ChanType:
			report(n, "channel type: a core never waits; inputs arrive as method calls")
		case *ast.SelectorExpr:
			// Obj is nil for a package name and set for a local variable
			// that shadows it.
			if x, ok := n.X.(*ast.Ident); ok && x.Obj == nil && timeNames[x.Name] {
				if why, bad := coreForbiddenTime[n.Sel.Name]; bad {
					report(n, "time.%s %s: a core takes the time as an input", n.Sel.Name, why)
				}
			}
		}
		return true
	})
	return problems
}

// moduleRoot returns the directory and path of the module under test.
func moduleRoot(t *testing.T) (dir, path string) {
	t.Helper()
	out := goCommand(t, "", nil, "list", "-m", "-json")
	var m struct{ Path, Dir string }
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("go list -m -json: %v", err)
	}
	if m.Dir == "" || m.Path == "" {
		t.Fatalf("go list -m -json gave no module: %s", out)
	}
	return m.Dir, m.Path
}

// listConfigs are the build configurations whose imports the table must
// allow: files behind the invariants tag and the non-Linux fallbacks
// (fsutil_other.go, enable_other.go) import too.
var listConfigs = []struct {
	env  []string
	args []string
}{
	{env: nil, args: nil},
	{env: nil, args: []string{"-tags", "invariants"}},
	{env: []string{"GOOS=darwin"}, args: nil},
}

// listPackages returns every package of the module with the union of its
// non-test imports over listConfigs.
func listPackages(t *testing.T, root string) []goPackage {
	t.Helper()
	byPath := map[string]*goPackage{}
	var order []string
	for _, cfg := range listConfigs {
		args := append([]string{"list", "-e", "-json=ImportPath,Imports,Error"}, cfg.args...)
		out := goCommand(t, root, cfg.env, append(args, "./...")...)
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p goPackage
			err := dec.Decode(&p)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("go %s: %v", strings.Join(args, " "), err)
			}
			if p.Error != nil {
				// A package that does not build is someone else's test to
				// fail; its imports are still listed.
				t.Logf("%s go %s: %s: %s", strings.Join(cfg.env, " "), strings.Join(args, " "), p.ImportPath, p.Error.Err)
			}
			seen, ok := byPath[p.ImportPath]
			if !ok {
				byPath[p.ImportPath] = &p
				order = append(order, p.ImportPath)
				continue
			}
			for _, imp := range p.Imports {
				if !slices.Contains(seen.Imports, imp) {
					seen.Imports = append(seen.Imports, imp)
				}
			}
		}
	}
	out := make([]goPackage, 0, len(order))
	for _, path := range order {
		out = append(out, *byPath[path])
	}
	return out
}

// goCommand runs the go command in dir and returns its standard output.
func goCommand(t *testing.T, dir string, env []string, args ...string) []byte {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list packages: %v", err)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func reportAll(t *testing.T, prefix string, problems []string) {
	t.Helper()
	for _, p := range problems {
		t.Errorf("%s%s", prefix, p)
	}
}

// TestFileMap holds the package table of docs/ARCHITECTURE.md to the
// imports of every package of the module.
func TestFileMap(t *testing.T) {
	root, module := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, tableDoc))
	if err != nil {
		t.Fatal(err)
	}
	fm, problems := parseTable(string(doc))
	reportAll(t, tableDoc+": ", problems)

	pkgs := listPackages(t, root)
	rels := map[string]bool{}
	for _, p := range pkgs {
		if rel, ok := relative(module, p.ImportPath); ok {
			rels[rel] = true
		}
	}
	// A clean run must have compared something: the module has dozens of
	// packages and the table a row for each.
	if len(pkgs) < 20 || len(fm.rows) < 20 {
		t.Fatalf("checked %d packages against %d rows; expected at least 20 of each", len(pkgs), len(fm.rows))
	}
	reportAll(t, tableDoc+": ", checkTable(fm, rels))
	reportAll(t, "", checkImports(module, fm, pkgs))
}

// TestCoresStayDeterministic checks the core files of the protocol state
// machines.
func TestCoresStayDeterministic(t *testing.T) {
	root, _ := moduleRoot(t)
	checked := 0
	for _, cp := range cores {
		entries, err := os.ReadDir(filepath.Join(root, cp.dir))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		coreFiles, problems := classify(cp, names)
		reportAll(t, "", problems)
		fset := token.NewFileSet()
		for _, name := range coreFiles {
			f, err := parser.ParseFile(fset, filepath.Join(cp.dir, name), readFile(t, root, cp.dir, name), 0)
			if err != nil {
				t.Errorf("parse %s/%s: %v", cp.dir, name, err)
				continue
			}
			reportAll(t, "", checkCoreFile(fset, f))
			checked++
		}
	}
	if checked < 15 {
		t.Fatalf("checked %d core files; expected at least 15", checked)
	}
}

func readFile(t *testing.T, root, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
