package catalog

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
)

// FormatVersion is the newest catalog format this build knows: the number
// of migrations.
const FormatVersion = 23

//go:embed migrations/*.sql functions/*.sql reads/*.sql
var files embed.FS

var (
	migrations = load("migrations")
	functions  = strings.Join(load("functions"), "")
	reads      = strings.Join(load("reads"), "")
)

// Migrations returns the migrations in order: Migrations()[i] brings the
// catalog from version i to i+1. Each runs in the migrating transaction.
func Migrations() []string { return slices.Clone(migrations) }

// Functions returns every SECURITY DEFINER function Migrate (re)creates,
// in one script.
func Functions() string { return functions }

// Reads returns the read views (reads/*.sql), in one script: what code
// outside the engine reads of the catalog's storage. Migrate (re)creates
// them when the script changed.
func Reads() string { return reads }

// Render fills in the placeholders of a catalog script for an instance:
// {{S}} the quoted catalog schema, {{SN}} its name as a literal, {{SF}} the
// quoted fence schema, {{SFN}} the fence schema's name as a literal, and
// {{SL}} / {{SFL}} the quoted schemas with their quotes doubled, for use
// inside a literal.
func Render(s, schema, fenceSchema string) string {
	s = strings.ReplaceAll(s, "{{SL}}", strings.ReplaceAll(base.Ident(schema), "'", "''"))
	s = strings.ReplaceAll(s, "{{SFL}}", strings.ReplaceAll(base.Ident(fenceSchema), "'", "''"))
	s = strings.ReplaceAll(s, "{{SFN}}", base.Lit(fenceSchema))
	s = strings.ReplaceAll(s, "{{SF}}", base.Ident(fenceSchema))
	s = strings.ReplaceAll(s, "{{SN}}", base.Lit(schema))
	return strings.ReplaceAll(s, "{{S}}", base.Ident(schema))
}

// load reads the .sql files of dir in name order, each without its
// documenting header.
func load(dir string) []string {
	names, err := fs.Glob(files, dir+"/*.sql")
	if err != nil {
		panic(err)
	}
	slices.Sort(names)
	out := make([]string, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			panic(err)
		}
		body, err := stripHeader(string(b))
		if err != nil {
			panic(fmt.Sprintf("catalog: %s: %v", n, err))
		}
		out = append(out, body)
	}
	return out
}

// stripHeader drops a file's leading comment lines and the blank line
// ending them.
func stripHeader(s string) (string, error) {
	for {
		line, rest, ok := strings.Cut(s, "\n")
		if !ok {
			return "", fmt.Errorf("no blank line after the header")
		}
		if line == "" {
			return rest, nil
		}
		if line != "--" && !strings.HasPrefix(line, "-- ") {
			return "", fmt.Errorf("header line %q is not a comment", line)
		}
		s = rest
	}
}
