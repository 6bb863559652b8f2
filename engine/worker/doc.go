// Package worker is the environment every worker of a process shares: the
// configuration, the caller's pool and the workers' own (pinned session
// settings), the wake bus (in-process channels fed by NOTIFY), the worker
// states shown in trellis.proxy_workers, the metrics sinks, the test
// plants, the lock helpers and the definition fence (fence.go), and the
// definition rows the staging worker loads.
//
// The workers are layered packages, each embedding the type of the one
// below it, so a layer calls everything beneath it as its own methods and
// nothing above it:
//
//	staging      Stager: seal, capture installs (via capture), verification
//	  │          of catalog rows, build starts, retirement, trash
//	  ├─ drain   Drainer: pages of sealed batches, JOIN fan-out, failure
//	  │          isolation per definition, materialised keys of bulk batches
//	  ├─ capture Capturer: capture installs, schema, tamper and rewrite checks
//	  └─ build   Builder: build tasks (plans, chunks, sweeps, heap builds)
//	       └─ quarantine  held keys, column and transform fuses
//	            └─ derive Deriver: the compiled-plan cache, re-derive under
//	                 │    the ledger lock, the page tally
//	                 └─ worker Env
package worker
