// Package engine keeps Trellis target tables exactly equal to their
// definitions as source tables change. docs/engine.md is the reference: the
// catalog, each mechanism, the correctness hazards (H1-H13) and what each
// test covers.
//
// All state lives in the instance's catalog schema. Define runs in the
// client's own transaction; Run starts the in-process workers: the
// instance's staging singleton (capture installs, sealing, builds, log
// retirement) and N drain workers (pages of sealed batches, build tasks).
//
// How a committed write reaches a target:
//
//	application write (INSERT / UPDATE / DELETE / TRUNCATE on a source)
//	  │ capture trigger: one AFTER ... FOR EACH STATEMENT trigger per event,
//	  │ transition tables, one log row per statement with its changed keys
//	  ▼
//	_change_log (txid, src_table, keys, op, origin_lsn, hop, origin_at)
//	  │ staging seal, READ COMMITTED: take the seal lock, then in the next
//	  │ statement store the snapshot S_k; batch k = the rows visible in S_k
//	  │ and not in S_k-1 (visibility, not change_id order: H1)
//	  ▼
//	_batches (snapshot, done mask) + _batch_buckets (state, cursor, holdup)
//	  │ drain pages: oldest undrained batch only; one page = one READ
//	  │ COMMITTED transaction over keys in (src_table, key) COLLATE "C" order
//	  ▼
//	re-derive under the ledger lock: lock each key's <target>__ledger
//	  │ entry, then read the source in the next statement (H2) and write
//	  │ the difference (1-1: upsert/delete; aggregates: ledger diffs)
//	  ▼
//	target, with the bucket's cursor and the batch's done bit in the same
//	commit (the last bucket flips the batch in one UPDATE: H8)
//
//	builds: TRANSFORM -> capture installed and committed (H4) -> plan task
//	        -> chunk tasks (_build_tasks, taken by the drain workers) ->
//	        live flip under the definition row lock
//	chains: a target another definition reads is captured like a source;
//	        pages set trellis.origin/trellis.hop, so its log rows carry the
//	        page's least origin and a token waits for them (H3), and
//	        trellis.origin_at, the original write's time, for the chain's
//	        end-to-end latency
//
// Packages (docs/architecture.md has the rule depcheck enforces):
//
//	engine          façade (this package): New, Migrate, Run, Apply,
//	  │             Status, AwaitConverged; the public types as aliases
//	  ├─ staging    the staging worker: seal, installs, verification, retirement
//	  │  ├─ capture capture installs and health checks
//	  │  └─ drain   pages, JOIN fan-out, failure isolation, bulk batches
//	  │     └─ build  build tasks
//	  │        └─ quarantine  held keys and fuses
//	  │           └─ derive   plan cache, re-derive under the ledger lock
//	  │              └─ worker  the workers' shared environment
//	  ├─ ddl        the Trellis statements, run as the caller
//	  ├─ selfcheck  self-check jobs, through a Host interface
//	  ├─ sqlgen     the SQL of one compiled definition, one function per statement
//	  │    └─ model Spec, Compiled, key identity (KeySQL / EncodeKey / DecodeKey)
//	  ├─ catalog    migrations/NNN.sql and functions/*.sql, embedded; Render
//	  └─ base       quoting, advisory-lock keys, error classes (retry/data/internal)
package engine
