package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Size limits of the engine's code (issue 15): a file a reader can hold,
// a function a reviewer can follow. Tests count for files, not functions.
const (
	maxFileLines = 700
	maxFuncLines = 120
)

// sizeExceptions are the functions allowed over maxFuncLines, each with why
// (docs/architecture.md lists them too). Key: the path from the module
// root, a colon, the function's name (Type.Method for a method).
var sizeExceptions = map[string]string{}

// checkSizes reports files over maxFileLines and functions over
// maxFuncLines (outside tests, and not excepted) under dir.
func checkSizes(dir string) ([]string, error) {
	var out []string
	used := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := strings.Count(string(src), "\n"); n > maxFileLines {
			out = append(out, fmt.Sprintf("%s: %d lines (at most %d)", path, n, maxFileLines))
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			key := filepath.ToSlash(path) + ":" + funcName(fn)
			_, excepted := sizeExceptions[key]
			switch {
			case n > maxFuncLines && excepted:
				used[key] = true
			case n > maxFuncLines:
				out = append(out, fmt.Sprintf("%s: %d lines (at most %d)", key, n, maxFuncLines))
			}
		}
		return nil
	})
	// An exception nothing needs any more is dropped, so the list stays
	// the list of what is long.
	for key := range sizeExceptions {
		if strings.HasPrefix(key, dir+"/") && !used[key] {
			out = append(out, fmt.Sprintf("%s: listed in sizeExceptions but not over %d lines", key, maxFuncLines))
		}
	}
	sort.Strings(out)
	return out, err
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
