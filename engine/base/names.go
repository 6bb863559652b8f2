package base

import (
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Ident quotes one SQL identifier.
func Ident(s string) string { return pgx.Identifier{s}.Sanitize() }

// Lit quotes a string as an SQL literal, for the few statements that take
// no parameters (DDL, catalog functions' bodies).
func Lit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// LockKey derives a 64-bit advisory lock key from a name.
func LockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}
