// Package sqlgen generates the SQL of one compiled definition: the ledger
// lock, the derive statement a page runs per key set (1-1 upsert/delete,
// aggregate ledger diffs), the group tidying, and a build's chunk
// statements (fresh, heap, rebuild, groups, reconcile, prune, refresh);
// and, per captured table, the capture functions and triggers (capture.go,
// over an Instance: the catalog schema and the workers' role).
// It is pure string work over engine/model: no connection, no catalog, so
// testdata/generated/*.sql in the engine package pins its output and a
// change to it is reviewed as SQL.
//
// It imports engine/base and engine/model only.
package sqlgen
