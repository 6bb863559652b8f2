// Package drain runs the drain workers. A worker claims a page of a sealed
// batch's bucket (one READ COMMITTED transaction over keys in order), finds
// the definitions reading each changed table, fans JOIN items' changes out
// to the FROM keys (fanout.go), re-derives each definition's share under
// its fence and savepoint so one definition's failure defers only its own
// keys (isolate.go), and commits the bucket's cursor with the targets.
// Batches of more than a few pages materialise their keys once (bulk.go).
// Between pages a worker runs build tasks and self-check pages.
package drain
