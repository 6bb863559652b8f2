package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The engine's storage is its own (issue 15): outside engine/, Go code reads
// the catalog through the engine's exported functions, its catalog
// functions and its read views (engine/catalog/reads), never by naming a
// storage table or sequence. The names come from the migrations, so a new
// table is covered the day it is created. Test files may name them: a test
// looks at the state it provoked.

var storageDecl = regexp.MustCompile(`(?i)CREATE\s+(?:UNLOGGED\s+)?(?:TABLE|SEQUENCE)\s+(?:IF\s+NOT\s+EXISTS\s+)?\{\{S\}\}\.(_[a-z0-9_]+)`)

// storageNames lists the storage relations the migrations under dir create.
func storageNames(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range storageDecl.FindAllStringSubmatch(string(b), -1) {
			seen[strings.ToLower(m[1])] = true
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no storage relations found in %s", dir)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// checkStorageReads reports every non-test Go file outside engine/ that
// names a storage relation as a word of its own (so trellis.definitions,
// drain_workers or _definition_targets are not hits).
func checkStorageReads(root string) ([]string, error) {
	names, err := storageNames(filepath.Join(root, "engine", "catalog", "migrations"))
	if err != nil {
		return nil, err
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	re := regexp.MustCompile(`(?i)\b(` + strings.Join(quoted, "|") + `)\b`)
	var out []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "engine" || (rel != "." && strings.HasPrefix(d.Name(), ".")) || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if m := re.FindString(line); m != "" {
				out = append(out, fmt.Sprintf("%s:%d names the engine's storage relation %s: read it through an engine function, catalog function or read view",
					filepath.ToSlash(rel), i+1, m))
			}
		}
		return nil
	})
	return out, err
}
