package staging

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// keyRetirer retires materialised keys while this process runs the
// staging worker, on a connection of its own, whenever retirement pokes it
// (a batch drained) and every StagingInterval while keys are left: deleting
// a drained bulk batch's millions of keys on the staging connection held
// every seal behind it (a side writer's p99 ~1 s after a 1,000,000-key
// drain). One retirer per staging worker, so one per database.
func (e *Stager) keyRetirer(ctx context.Context) {
	tick := time.NewTicker(e.Cfg.StagingInterval)
	defer tick.Stop()
	left := true
	for ctx.Err() == nil {
		if left && !e.Plant.KeepLog {
			done, err := e.retireKeysOnce(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				e.Log.Debug("retiring materialised keys failed; retried", "err", err)
			case err == nil:
				left = !done
			}
		}
		select {
		case <-ctx.Done():
		case <-e.WakeKeys:
			left = true
		case <-tick.C:
		}
	}
}

// retireKeysOnce retires up to a few chunks of materialised keys on a pool
// connection.
func (e *Stager) retireKeysOnce(ctx context.Context) (done bool, err error) {
	conn, err := e.Workers.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	return e.RetireBatchKeys(ctx, conn.Conn(), 4)
}

// RetireBatchKeys deletes up to chunks×RetireChunk materialised keys of
// drained batches (found through their keyed buckets), and any keys of
// batches already retired; done when none are left. Every read is an
// index range of a batch it retires: a scan of _batch_keys (a LIMIT over a
// predicate the planner cannot estimate, such as batch_seq < a subquery)
// walked the millions of keys of a bulk batch still draining on every pass
// (when this ran on the staging connection, the seal waited that long: the
// side writer's p50 grew with the bulk batch, 1 s beside 10,000,000 keys).
func (e *Stager) RetireBatchKeys(ctx context.Context, conn *pgx.Conn, chunks int) (done bool, err error) {
	for {
		var seqs []int64
		if err := conn.QueryRow(ctx, e.RetiringKeyBatchesSQL()).Scan(&seqs); err != nil {
			return false, err
		}
		if len(seqs) == 0 {
			return true, nil
		}
		for _, seq := range seqs {
			for {
				if chunks == 0 {
					return false, nil
				}
				chunks--
				tag, err := conn.Exec(ctx, e.RetireKeyChunkSQL(), seq)
				if err != nil {
					return false, err
				}
				if tag.RowsAffected() < int64(e.Cfg.RetireChunk) {
					break // this batch's keys are gone
				}
			}
		}
	}
}

// RetiringKeyBatchesSQL lists the batches whose materialised keys retire:
// drained batches' keyed buckets with keys left, and the oldest keys' batch
// when it is older than every batch row (retired). An index probe per
// batch and one min bounded below the batches: the keys of a batch still
// draining, visible or not, are never visited.
func (e *Stager) RetiringKeyBatchesSQL() string {
	return fmt.Sprintf(`SELECT ARRAY(
		  SELECT DISTINCT bb.batch_seq FROM %[1]s bb JOIN %[2]s b ON b.seq = bb.batch_seq
		  WHERE bb.keyed AND b.state = 'drained' AND EXISTS (SELECT 1 FROM %[3]s k WHERE k.batch_seq = bb.batch_seq)
		  UNION
		  SELECT m FROM (SELECT min(k.batch_seq) AS m FROM %[3]s k
		    WHERE k.batch_seq < (SELECT coalesce(min(seq), %[4]d) FROM %[2]s)) o WHERE m IS NOT NULL
		  ORDER BY 1)`, e.Tbl("_batch_buckets"), e.Tbl("_batches"), e.Tbl("_batch_keys"), int64(math.MaxInt64))
}

// RetireKeyChunkSQL deletes up to RetireChunk keys of batch $1: equality
// on the key's first column, in index order, so an index range whatever
// the planner estimates.
func (e *Stager) RetireKeyChunkSQL() string {
	return fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid = ANY (ARRAY(
		SELECT k.ctid FROM %[1]s k WHERE k.batch_seq = $1
		ORDER BY k.batch_seq, k.bucket, k.src_table, k.key LIMIT %[2]d))`, e.Tbl("_batch_keys"), e.Cfg.RetireChunk)
}
