package base

import (
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Ident quotes one SQL identifier.
func Ident(s string) string { return pgx.Identifier{s}.Sanitize() }

// Table quotes a relation name of schema: "schema"."name".
func Table(schema, name string) string { return Ident(schema) + "." + Ident(name) }

// Channel is the NOTIFY channel what of the instance whose catalog is
// schema (the catalog functions notify the same names).
func Channel(schema, what string) string { return schema + "_" + what }

// Lit quotes a string as an SQL literal, for the few statements that take
// no parameters (DDL, catalog functions' bodies).
func Lit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// LockKey derives a 64-bit advisory lock key from a name.
func LockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}
