// Package grammar lexes, parses and statically checks Trellis statements
// (grammar spec ../shared/spec/grammar.md), and renders them back to text.
//
// Layers:
//   - Recognize: a byte-level prefilter for the router (no allocation).
//   - Parse: lexing with Postgres's identifier and comment rules, a
//     hand-written parser for the statement structure, and pg_query for the
//     formulas, converted into this package's Expr tree (ast.go). Parse runs
//     the checks of spec §9.2 stage A, which need no database.
//   - Resolve: the pure definition rules of stage C (names, key space,
//     ON conditions of joins, cycles) over catalog facts the engine supplies.
//   - Render / Canonical: SQL text from the tree; identifiers quoted, literals
//     escaped, never the client's text pasted.
//
// Errors are *pgerr.Error with SQLSTATE, class/variant (spec §9.4), a hint
// where a fix exists and a 1-based character position relative to the text
// given to Parse.
package grammar
