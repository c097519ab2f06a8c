package lint

import (
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// syntheticDoc is a small file map in the real format (with ' for `, which a
// raw string cannot hold). syntheticPackages is a module that keeps it.
const syntheticDoc = `# Architecture

Prose before the table is ignored, | even | with | pipes |.

| package | owns | may import |
|---|---|---|
| 'cmd/tool' | the CLI | 'internal/ledger/...' (the client and its core), cobra |
| 'internal/ledger/ledgerclient' | the shell of the ledger core | 'internal/ledger', 'internal/bookie/client', 'internal/meta', 'internal/loop' |
| 'internal/ledger' | the core | 'internal/meta' (types only: 'Version', sentinel errors) |
| 'internal/bookie/client' | the bookie client | standard library |
| 'internal/loop' | *(planned)* the driver loop | standard library |
| 'internal/meta' | the store | etcd client |

## Key files

| file | what |
|---|---|
| 'internal/ledger/writer.go' | not a package row |
`

func syntheticPackages() []goPackage {
	return []goPackage{
		{ImportPath: "quire/cmd/tool", Imports: []string{"fmt", "github.com/spf13/cobra", "quire/internal/ledger", "quire/internal/ledger/ledgerclient"}},
		{ImportPath: "quire/internal/ledger/ledgerclient", Imports: []string{"context", "quire/internal/bookie/client", "quire/internal/ledger", "quire/internal/meta"}},
		{ImportPath: "quire/internal/ledger", Imports: []string{"errors", "hash/crc32", "quire/internal/meta"}},
		{ImportPath: "quire/internal/bookie/client", Imports: []string{"net", "sync"}},
		{ImportPath: "quire/internal/meta", Imports: []string{"go.etcd.io/etcd/api/v3/v3rpc/rpctypes", "go.etcd.io/etcd/client/v3"}},
	}
}

// checkSynthetic runs the whole table check on a synthetic module, as
// TestFileMap does on the real one.
func checkSynthetic(doc string, pkgs []goPackage) []string {
	fm, problems := parseTable(strings.ReplaceAll(doc, "'", "`"))
	rels := map[string]bool{}
	for _, p := range pkgs {
		if rel, ok := relative("quire", p.ImportPath); ok {
			rels[rel] = true
		}
	}
	problems = append(problems, checkTable(fm, rels)...)
	return append(problems, checkImports("quire", fm, pkgs)...)
}

// withImport returns the synthetic packages with pkg also importing imp.
func withImport(pkg, imp string) []goPackage {
	pkgs := syntheticPackages()
	for i := range pkgs {
		if pkgs[i].ImportPath == pkg {
			pkgs[i].Imports = append(pkgs[i].Imports, imp)
		}
	}
	return pkgs
}

// editDoc returns syntheticDoc with old replaced by new, which must occur.
func editDoc(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(syntheticDoc, old) {
		t.Fatalf("syntheticDoc has no %q", old)
	}
	return strings.Replace(syntheticDoc, old, new, 1)
}

// checkCoreSource parses src as the core file core.go and checks it.
func checkCoreSource(t *testing.T, src string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "core.go", src, 0)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return checkCoreFile(fset, f)
}

// TestCheckersCatchBreakage runs the checkers on inputs with one thing
// broken each and requires that thing reported; the clean inputs must pass,
// so each report comes from its one breakage.
func TestCheckersCatchBreakage(t *testing.T) {
	group := corePackage{dir: "internal/kafka/group", core: []string{"group.go", "offsets.go"}, shell: []string{"coordinator.go"}}
	cases := []struct {
		name  string
		check func(t *testing.T) []string
		want  []string // each must appear in some problem; none: no problems
	}{
		// The file map.
		{"clean module", func(t *testing.T) []string { return checkSynthetic(syntheticDoc, syntheticPackages()) }, nil},
		{"core imports the bookie client", func(t *testing.T) []string {
			return checkSynthetic(syntheticDoc, withImport("quire/internal/ledger", "quire/internal/bookie/client"))
		}, []string{"internal/ledger imports quire/internal/bookie/client, which its row (line 9) does not allow"}},
		{"core imports its own shell (no implicit subpackages)", func(t *testing.T) []string {
			return checkSynthetic(syntheticDoc, withImport("quire/internal/ledger", "quire/internal/ledger/ledgerclient"))
		}, []string{"internal/ledger imports quire/internal/ledger/ledgerclient"}},
		{"third-party module not in the row", func(t *testing.T) []string {
			return checkSynthetic(syntheticDoc, withImport("quire/internal/ledger", "github.com/prometheus/client_golang/prometheus"))
		}, []string{"internal/ledger imports github.com/prometheus/client_golang/prometheus"}},
		{"a subtree allows only itself", func(t *testing.T) []string {
			return checkSynthetic(syntheticDoc, withImport("quire/cmd/tool", "quire/internal/meta"))
		}, []string{"cmd/tool imports quire/internal/meta"}},
		{"a package without a row", func(t *testing.T) []string {
			return checkSynthetic(syntheticDoc, append(syntheticPackages(), goPackage{ImportPath: "quire/internal/newthing", Imports: []string{"fmt"}}))
		}, []string{"internal/newthing is not in the package table"}},
		{"unknown dependency name", func(t *testing.T) []string {
			return checkSynthetic(editDoc(t, "| etcd client |", "| etcd-client |"), syntheticPackages())
		}, []string{`line 12: ` + "`internal/meta`" + ` may import "etcd-client": not a backticked package path`}},
		{"a row for a package that does not exist", func(t *testing.T) []string {
			return checkSynthetic(editDoc(t, "| 'internal/meta' |", "| 'internal/gone' | gone | standard library |\n| 'internal/meta' |"), syntheticPackages())
		}, []string{"row `internal/gone` names no package of the module"}},
		{"a planned package that exists", func(t *testing.T) []string {
			return checkSynthetic(syntheticDoc, append(syntheticPackages(), goPackage{ImportPath: "quire/internal/loop"}))
		}, []string{"`internal/loop` exists now: remove *(planned)*"}},
		{"an import pointing up the table", func(t *testing.T) []string {
			return checkSynthetic(editDoc(t, "| 'internal/meta' (types only", "| 'internal/meta', 'internal/ledger/ledgerclient' (types only"),
				withImport("quire/internal/ledger", "quire/internal/ledger/ledgerclient"))
		}, []string{"`internal/ledger` may import `internal/ledger/ledgerclient`, but row `internal/ledger/ledgerclient` (line 8) is not below it"}},
		{"a subtree that includes its own row", func(t *testing.T) []string {
			return checkSynthetic(editDoc(t, "| 'internal/meta' (types only", "| 'internal/...' (types only"), syntheticPackages())
		}, []string{"`internal/ledger` may import `internal/...`, but row `internal/ledger` (line 9) is not below it"}},
		{"an import of no row", func(t *testing.T) []string {
			return checkSynthetic(editDoc(t, "| 'internal/meta' (types only", "| 'internal/nope' (types only"), syntheticPackages())
		}, []string{"may import `internal/nope`, which names no row", "internal/ledger imports quire/internal/meta"}},
		{"a row with two cells", func(t *testing.T) []string {
			return checkSynthetic(editDoc(t, "| 'internal/bookie/client' | the bookie client | standard library |", "| 'internal/bookie/client' | standard library |"), syntheticPackages())
		}, []string{"line 10: want 3 cells", "internal/bookie/client is not in the package table"}},
		{"a package cell that is not a path", func(t *testing.T) []string {
			return checkSynthetic(editDoc(t, "| 'internal/bookie/client' |", "| the bookie client |"), syntheticPackages())
		}, []string{`line 10: package cell "the bookie client" is not one backticked path`}},
		{"a duplicate row", func(t *testing.T) []string {
			return checkSynthetic(editDoc(t, "| 'internal/meta' | the store | etcd client |", "| 'internal/meta' | the store | etcd client |\n| 'internal/meta' | again | standard library |"), syntheticPackages())
		}, []string{"line 13: `internal/meta` has a row already, at line 12"}},
		{"standard library beside other entries", func(t *testing.T) []string {
			return checkSynthetic(editDoc(t, "| etcd client |", "| etcd client, standard library |"), syntheticPackages())
		}, []string{`"standard library" stands alone`}},
		{"no table", func(t *testing.T) []string {
			return checkSynthetic(editDoc(t, "| package | owns | may import |", "| pkg | owns | imports |"), syntheticPackages())
		}, []string{"no package table", "internal/ledger is not in the package table"}},

		// The core files.
		{"clean core", func(t *testing.T) []string {
			return checkCoreSource(t, `package core
import ("fmt"; "time")
type Core struct{ now time.Time; tick time.Duration }
func (c *Core) Tick(now time.Time) { c.now = now.Add(c.tick); fmt.Sprint(time.Unix(0, 0)) }
// A parameter named time shadows the package: not a clock read.
func shadow(time interface{ Now() int }) int { return time.Now() }
`)
		}, nil},
		{"go statement", func(t *testing.T) []string {
			return checkCoreSource(t, "package core\nfunc f() {}\nfunc g() { go f() }\n")
		}, []string{"core.go:3: go statement"}},
		{"time.Now", func(t *testing.T) []string {
			return checkCoreSource(t, "package core\nimport \"time\"\nfunc f() time.Time { return time.Now() }\n")
		}, []string{"core.go:3: time.Now reads the clock"}},
		{"aliased time.Since", func(t *testing.T) []string {
			return checkCoreSource(t, "package core\nimport clk \"time\"\nfunc f(t clk.Time) clk.Duration { return clk.Since(t) }\n")
		}, []string{"core.go:3: time.Since reads the clock"}},
		{"timers as values", func(t *testing.T) []string {
			return checkCoreSource(t, "package core\nimport \"time\"\nvar after, sleep = time.AfterFunc, time.Sleep\nvar ticker = time.NewTicker\n")
		}, []string{"time.AfterFunc starts a timer", "time.Sleep blocks", "core.go:4: time.NewTicker starts a ticker"}},
		{"dot-imported time", func(t *testing.T) []string {
			return checkCoreSource(t, "package core\nimport . \"time\"\nvar d Duration\n")
		}, []string{`core.go:2: dot-imports "time"`}},
		{"forbidden imports", func(t *testing.T) []string {
			return checkCoreSource(t, "package core\nimport (\n\t\"net\"\n\t\"os\"\n\t\"sync\"\n\t\"sync/atomic\"\n\t\"context\"\n)\nvar (_ net.Conn; _ os.File; _ sync.Mutex; _ atomic.Int64; _ context.Context)\n")
		}, []string{`core.go:3: imports "net"`, `core.go:4: imports "os"`, `core.go:5: imports "sync"`, `core.go:6: imports "sync/atomic"`, `core.go:7: imports "context"`}},
		{"select and channels", func(t *testing.T) []string {
			return checkCoreSource(t, "package core\nfunc f(c chan int) {\n\tselect {\n\tcase <-c:\n\t}\n}\n")
		}, []string{"core.go:2: channel type", "core.go:3: select statement"}},

		// Which files are cores.
		{"classified files", func(t *testing.T) []string {
			core, problems := classify(group, []string{"coordinator.go", "group.go", "group_test.go", "offsets.go", "testdata"})
			if !slices.Equal(core, []string{"group.go", "offsets.go"}) {
				t.Errorf("core files %v, want [group.go offsets.go]", core)
			}
			return problems
		}, nil},
		{"a new file in a core package", func(t *testing.T) []string {
			_, problems := classify(group, []string{"coordinator.go", "group.go", "offsets.go", "timers.go", "timers_test.go"})
			return problems
		}, []string{"internal/kafka/group/timers.go is neither a core nor a shell file"}},
		{"a listed core file that is gone", func(t *testing.T) []string {
			_, problems := classify(group, []string{"coordinator.go", "group.go"})
			return problems
		}, []string{"internal/kafka/group/offsets.go is listed in cores"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			problems := c.check(t)
			if c.want == nil && len(problems) > 0 {
				t.Fatalf("want no problems, got:\n%s", strings.Join(problems, "\n"))
			}
			for _, w := range c.want {
				if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, w) }) {
					t.Errorf("no problem reports %q; got:\n%s", w, strings.Join(problems, "\n"))
				}
			}
		})
	}
}
