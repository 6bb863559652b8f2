package drain

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bulk batches (issue 18). A page reads the next PageSize keys of its
// bucket past the bucket's cursor. Read from the change log, that costs the
// whole bucket every page (its rows are unnested, grouped and sorted, then
// all but one page thrown away), so a bucket of N keys drains in
// O(N²/PageSize): a single 10,000,000-row INSERT, which capture logs as one
// row with every key in an array and so lands in one bucket, would take
// days. A bucket holding more than bulkFactor pages of keys therefore has
// its distinct keys written once, by its first page, into _batch_keys,
// ordered by the page order (src_table, key in "C" collation); every page of
// it then reads one index range past the cursor.
//
// Why it is exact: the rows are exactly the page query's groups (the same
// window, bucket and GROUP BY, with the same per-key origin, hop and ages),
// and a sealed batch's window never changes (rows written later carry later
// transaction ids, outside its snapshot pair). The cursor, the claim, the
// per-key ledger lock, the origin/hop rules and truncate ordering are the
// page's as before. The materialising page commits or rolls back with its
// keys and the bucket's keyed flag, so a crash or a failed page leaves the
// bucket as it was, and a probe of it materialises again. Retire deletes
// the keys of drained batches in chunks.
const BulkFactor = 4

// Batches drain out of order (issue 18): a worker claims the open bucket
// with the fewest pages done among the drainable batches, oldest first, so
// a bulk bucket, which has run pages, yields to the fresh buckets of every
// batch sealed after it; the seal does not count bulk batches among the two
// it lets wait. Exact because a page re-derives each key from live state
// under its ledger lock whatever batch named it, so the order in which two
// batches apply one key does not change the result. Two orders do matter
// and stay strict: a truncate batch drains alone, after every batch before
// it and before every batch after it (its clear would undo what a later
// batch applied, drainableBatchesSQL); and every reader of "how far the
// drain has got" (convergence, retirement, the self-check's in-flight keys)
// uses the drained prefix, never the newest drained batch
// (drainedSnapSQL).

// MaxUndrainedBatches bounds how many batches may wait behind a bulk one.
const MaxUndrainedBatches = 64

// BulkBatchKeys is the key count above which a sealed batch counts as
// bulk: as many as one materialised bucket holds at least.
func BulkBatchKeys(pageSize int) int { return BulkFactor * pageSize }

// drainableBatchesSQL selects the batches whose buckets may be claimed:
// every undrained batch before the first undrained truncate batch, or that
// truncate batch alone once it is the oldest.
func (e *Drainer) drainableBatchesSQL() string {
	return fmt.Sprintf(`SELECT b.seq, b.bucket_count, b.has_truncate, b.row_count FROM %[1]s b
		WHERE b.state <> 'drained' AND b.seq <= coalesce((SELECT min(t.seq) FROM %[1]s t WHERE t.state <> 'drained' AND t.has_truncate), %[2]d)
		  AND (NOT b.has_truncate OR b.seq = (SELECT min(o.seq) FROM %[1]s o WHERE o.state <> 'drained'))
		ORDER BY b.seq LIMIT %[3]d`, e.Tbl("_batches"), int64(math.MaxInt64), MaxUndrainedBatches)
}

// DrainedSnapSQL selects the snapshot of the drained prefix (catalog
// function _drained_prefix): the newest batch before which every batch has
// drained. The newest drained batch alone says nothing of the batches
// before it.
func (e *Drainer) DrainedSnapSQL() string {
	return fmt.Sprintf(`SELECT snap FROM %s WHERE seq = %s()`, e.Tbl("_batches"), e.Tbl("_drained_prefix"))
}

// pageKeys returns the page's keys past (at, ak) with their origin, hop and
// ages, materialising a large bucket's keys on its first page.
func (e *Drainer) pageKeys(ctx context.Context, tx pgx.Tx, pa pageAt, at, ak string) (pgx.Rows, error) {
	keyed := pa.keyed
	// A bucket holds at most its batch's keys: only a bulk batch's first
	// pages count theirs (no extra query for the common small batch).
	if !keyed && pa.afterTable == nil && pa.batchKeys > int64(BulkBatchKeys(e.Cfg.PageSize)) {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(coalesce(cardinality(c.keys), 1)), 0)::int8 `+e.batchWindow(false)+
			` AND c.change_id % $2 = $3`, pa.batch, pa.bucketCount, pa.bucket).Scan(&n); err != nil {
			return nil, err
		}
		if n > int64(BulkBatchKeys(e.Cfg.PageSize)) {
			if err := e.materializeKeys(ctx, tx, pa); err != nil {
				return nil, err
			}
			keyed = true
		}
	}
	if keyed {
		return tx.Query(ctx, fmt.Sprintf(`SELECT src_table, key, unknown_origin, origin_lsn::text, hop,
			  extract(epoch FROM clock_timestamp() - staged_at)::float8,
			  extract(epoch FROM origin_at)::float8,
			  extract(epoch FROM clock_timestamp() - origin_at)::float8, fanned, fan_defs
			FROM %s WHERE batch_seq = $1 AND bucket = $2
			  AND (src_table, key) > ($3::text COLLATE "C", $4::text COLLATE "C")
			ORDER BY src_table, key LIMIT $5`, e.Tbl("_batch_keys")),
			pa.batch, pa.bucket, at, ak, e.Cfg.PageSize)
	}
	return tx.Query(ctx, e.LogPageKeysSQL(), pa.batch, pa.bucketCount, pa.bucket, at, ak, e.Cfg.PageSize)
}

// LogPageKeysSQL reads a page's keys from the change log: batch $1,
// bucket $3 of $2, past ($4, $5), at most $6.
func (e *Drainer) LogPageKeysSQL() string {
	return `SELECT c.src_table, k.key, bool_or(c.origin_lsn IS NULL), min(c.origin_lsn)::text, max(c.hop),
		  extract(epoch FROM clock_timestamp() - min(c.staged_at))::float8,
		  extract(epoch FROM min(coalesce(c.origin_at, c.staged_at)))::float8,
		  extract(epoch FROM clock_timestamp() - min(coalesce(c.origin_at, c.staged_at)))::float8,
		  bool_and(c.op = 'fanout'), array_agg(DISTINCT c.definition_id) FILTER (WHERE c.op = 'fanout') ` +
		e.batchKeysWindow(`c.change_id % $2 = $3`) +
		` AND k.key IS NOT NULL
		  AND (c.src_table COLLATE "C", k.key COLLATE "C") > ($4::text COLLATE "C", $5::text COLLATE "C")
		GROUP BY c.src_table, k.key ORDER BY c.src_table COLLATE "C", k.key COLLATE "C" LIMIT $6`
}

// batchKeysWindow is the FROM and WHERE of batch $1's keys, one row per
// key of each log row in the window that meets cond. The window is applied
// before the unnest, in a subquery the planner keeps (OFFSET 0): joined flat,
// it checks the previous snapshot only after unnesting, so while a bulk
// statement's log row (its keys in one array) is in the log, every later
// batch's page unnested its million keys to throw them away (~0.9 s a page,
// the side writer's p99 beside a bulk drain).
func (e *Drainer) batchKeysWindow(cond string) string {
	return fmt.Sprintf(`FROM (SELECT c.* %s AND %s OFFSET 0) c
		  CROSS JOIN LATERAL unnest(coalesce(c.keys, ARRAY[c.key])) AS k(key)
		WHERE true`, e.batchWindow(false), cond)
}

// materializeKeys writes bucket pa's distinct keys, with what the page
// query would compute for each, into _batch_keys and marks the bucket.
func (e *Drainer) materializeKeys(ctx context.Context, tx pgx.Tx, pa pageAt) error {
	t0 := time.Now()
	defer func() {
		e.Log.Debug("bucket keys materialised", "batch", pa.batch, "bucket", pa.bucket, "took", time.Since(t0))
	}()
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (batch_seq, bucket, src_table, key, unknown_origin, origin_lsn, hop, staged_at, origin_at, fanned, fan_defs)
		SELECT $1::int8, $3::int2, c.src_table, k.key, bool_or(c.origin_lsn IS NULL), min(c.origin_lsn), max(c.hop),
		  min(c.staged_at), min(coalesce(c.origin_at, c.staged_at)), bool_and(c.op = 'fanout'),
		  array_agg(DISTINCT c.definition_id) FILTER (WHERE c.op = 'fanout') `, e.Tbl("_batch_keys"))+
		e.batchKeysWindow(`c.change_id % $2 = $3`)+` AND k.key IS NOT NULL
		GROUP BY c.src_table, k.key`, pa.batch, pa.bucketCount, pa.bucket); err != nil {
		return err
	}
	if e.Plant.BulkKeyLost {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %[1]s WHERE (batch_seq, bucket, src_table, key) IN
			(SELECT batch_seq, bucket, src_table, key FROM (SELECT *, row_number() OVER (ORDER BY src_table, key) AS n
			   FROM %[1]s WHERE batch_seq = $1 AND bucket = $2) k WHERE n %% 3 = 1)`,
			e.Tbl("_batch_keys")), pa.batch, pa.bucket); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET keyed = true WHERE batch_seq = $1 AND bucket = $2`, e.Tbl("_batch_buckets")), pa.batch, pa.bucket)
	return err
}
