// Package derive re-derives keys of a definition inside a caller's
// transaction: lock the keys' ledger entries, then read the sources live in
// the next statement and write the difference to the target (the hazard
// H2 of docs/engine.md). It keeps the compiled-plan cache (the SQL sqlgen
// generates per definition version and paused fields), the types a drain
// page hands around (PageKey, KeyMeta, ReaderDef), and the page tally that
// feeds per-transform metrics after a commit. Drain pages, build chunks and
// quarantine probes all re-derive through ApplyKeys.
package derive
