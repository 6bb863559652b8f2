package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func write(t *testing.T, root, rel, text string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestStorageReadsFlagged(t *testing.T) {
	root := t.TempDir()
	write(t, root, "engine/catalog/migrations/001.sql", "CREATE TABLE {{S}}._things (id int);\nCREATE SEQUENCE {{S}}._thing_seq;\n")
	write(t, root, "engine/catalog/migrations/002.sql", "CREATE UNLOGGED TABLE IF NOT EXISTS {{S}}._more (id int);\n")
	write(t, root, "engine/reads.go", "package engine\nconst q = `SELECT * FROM trellis._things`\n")
	write(t, root, "surface/bad.go", "package surface\nconst q = `SELECT * FROM trellis._things`\nconst r = \"nextval('_thing_seq')\"\n")
	write(t, root, "surface/ok.go", "package surface\nconst q = `SELECT * FROM trellis.things, trellis._read_things, trellis._things_of(), x_more`\n")
	write(t, root, "surface/bad_test.go", "package surface\nconst q = `SELECT * FROM trellis._more`\n")
	names, err := storageNames(filepath.Join(root, "engine", "catalog", "migrations"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"_more", "_thing_seq", "_things"}) {
		t.Fatalf("storage names %v", names)
	}
	got, err := checkStorageReads(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "surface/bad.go:2 ") || !strings.Contains(got[0], "_things") ||
		!strings.HasPrefix(got[1], "surface/bad.go:3 ") || !strings.Contains(got[1], "_thing_seq") {
		t.Fatalf("violations:\n%s", strings.Join(got, "\n"))
	}
}

// The module itself: the real migrations name the tables the rule is about.
func TestStorageNamesOfTheCatalog(t *testing.T) {
	names, err := storageNames(filepath.Join("..", "..", "engine", "catalog", "migrations"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"_definitions", "_change_log", "_batches", "_definition_reads", "_poison", "_deferred",
		"_page_failures", "_batch_buckets", "_captured_tables", "_paused_columns", "_instance", "_change_seq"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s missing from %v", want, names)
		}
	}
}
