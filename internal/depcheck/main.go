// Command depcheck enforces the package rule of the architecture: which
// packages of this module may import which, that cgo (pg_query) stays in
// grammar and router, the engine's size limits (size.go), and that no code
// outside the engine names its storage tables (storage.go). `make deps`
// runs it from the module root; a violation exits 1.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

const module = "github.com/trellis-proxy/trellis-proxy"

// allowed lists, per package (relative to the module), the module packages it
// may import; an entry covers its sub-packages unless they have one of their
// own (the longest entry wins), and a package may always import its own
// sub-packages. Packages not listed (cmd, integration, internal tools) may
// import anything.
//
// The engine's packages form layers: base (quoting, lock keys, error
// classes, Querier) at the bottom; model (the definition model) and catalog
// (the embedded schema) on it; sqlgen (generated statements) on model; ddl
// (the Trellis statements, run as the caller) on model and sqlgen; and the
// selfcheck (the self-check jobs, reading the engine through a Host
// interface) on sqlgen; the workers' layers (worker, derive, quarantine,
// build, capture and drain, staging), each on those below it; and the
// root engine package, the façade and the only way in from outside, on
// all of them. ddl never imports the workers: a statement starts nothing.
var allowed = map[string][]string{
	"pgerr":            {},
	"sqlscan":          {},
	"grammar":          {"pgerr", "sqlscan"},
	"router":           {"grammar", "pgerr", "sqlscan"},
	"engine":           {"grammar", "pgerr"},
	"engine/base":      {"pgerr"},
	"engine/catalog":   {"engine/base", "pgerr"},
	"engine/model":     {"engine/base", "pgerr"},
	"engine/sqlgen":    {"engine/base", "engine/model"},
	"engine/ddl":       {"engine/base", "engine/model", "engine/sqlgen", "grammar", "pgerr"},
	"engine/selfcheck": {"engine/base", "engine/sqlgen", "pgerr"},
	// The workers, each layer on the ones below it only: worker (the
	// shared environment) < derive < quarantine < build < capture, drain
	// < staging. capture and drain never import each other.
	"engine/worker":      {"engine/base", "engine/model", "engine/sqlgen", "engine/catalog", "engine/ddl", "engine/selfcheck", "pgerr"},
	"engine/derive":      {"engine/worker", "engine/base", "engine/model", "engine/sqlgen", "pgerr"},
	"engine/quarantine":  {"engine/derive", "engine/worker", "engine/base", "engine/model", "engine/sqlgen", "pgerr"},
	"engine/build":       {"engine/quarantine", "engine/derive", "engine/worker", "engine/base", "engine/model", "engine/sqlgen", "engine/catalog", "pgerr"},
	"engine/capture":     {"engine/build", "engine/worker", "engine/base", "engine/model", "engine/sqlgen", "grammar", "pgerr"},
	"engine/drain":       {"engine/build", "engine/quarantine", "engine/derive", "engine/worker", "engine/base", "engine/model", "engine/sqlgen", "pgerr"},
	"engine/staging":     {"engine/capture", "engine/drain", "engine/build", "engine/quarantine", "engine/derive", "engine/worker", "engine/base", "engine/model", "engine/sqlgen", "engine/catalog", "engine/ddl", "grammar", "pgerr"},
	"virtualtables":      {"engine", "pgerr"},
	"wire":               {"pgerr"},
	"internal/pgcluster": {},
}

// cgoAllowed are the only packages that may import pg_query.
var cgoAllowed = map[string]bool{"grammar": true, "router": true}

const pgQuery = "github.com/pganalyze/pg_query_go"

func main() {
	// Test files may also use internal/pgcluster (every behaviour test
	// needs a real Postgres); otherwise they follow their package's rule.
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}} | {{join .TestImports \" \"}}", "./...").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "depcheck: go list:", err)
		os.Exit(2)
	}
	var violations []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		rule, ruled := ruleFor(pkg)
		inTests := false
		for _, imp := range fields[1:] {
			if imp == "|" {
				inTests = true
				continue
			}
			if inTests && imp == module+"/internal/pgcluster" {
				continue
			}
			if strings.HasPrefix(imp, pgQuery) && !cgoAllowed[topLevel(pkg)] {
				violations = append(violations, fmt.Sprintf("%s imports %s: cgo stays in grammar and router", pkg, imp))
			}
			if !ruled || !strings.HasPrefix(imp, module+"/") {
				continue
			}
			target := strings.TrimPrefix(imp, module+"/")
			if target == pkg || strings.HasPrefix(target, pkg+"/") {
				continue
			}
			if !permits(rule, target) {
				violations = append(violations, fmt.Sprintf("%s imports %s: not allowed by the package rule", pkg, target))
			}
		}
	}
	sizes, err := checkSizes("engine")
	if err != nil {
		fmt.Fprintln(os.Stderr, "depcheck: sizes:", err)
		os.Exit(2)
	}
	violations = append(violations, sizes...)
	reads, err := checkStorageReads(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "depcheck: storage reads:", err)
		os.Exit(2)
	}
	violations = append(violations, reads...)
	if len(violations) > 0 {
		for _, v := range violations {
			fmt.Fprintln(os.Stderr, "depcheck:", v)
		}
		os.Exit(1)
	}
	fmt.Println("depcheck: package rule holds")
}

func topLevel(pkg string) string {
	if pkg == "internal/pgcluster" || strings.HasPrefix(pkg, "internal/pgcluster/") {
		return "internal/pgcluster"
	}
	top, _, _ := strings.Cut(pkg, "/")
	return top
}

func ruleFor(pkg string) ([]string, bool) {
	best := ""
	for k := range allowed {
		if (pkg == k || strings.HasPrefix(pkg, k+"/")) && len(k) > len(best) {
			best = k
		}
	}
	r, ok := allowed[best]
	return r, ok
}

func permits(rule []string, target string) bool {
	for _, a := range rule {
		if a == "engine" {
			// The engine's sub-packages are its own: outside engine/, an
			// allowance for the engine is for its façade alone.
			if target == a {
				return true
			}
			continue
		}
		if target == a || strings.HasPrefix(target, a+"/") {
			return true
		}
	}
	return false
}
