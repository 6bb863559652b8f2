package main

// Shared plumbing of the JOIN benchmarks (joins spec §7: J1 build, J2
// dimension latency, J3 write tax, J5 fan-out cost). JOIN targets are
// defined the way a client defines them: the TRANSFORM text parsed by the
// grammar and applied by the engine inside a transaction, whose commit is
// the moment the engine may start building.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/grammar"
)

// applyTransform parses stmt, applies it in its own transaction and commits;
// it returns when the commit returned (the build's start line for J1).
func applyTransform(ctx context.Context, e *runningEngine, pool *pgxpool.Pool, stmt string) (committed time.Time, err error) {
	st, err := grammar.Parse(stmt)
	if err != nil {
		return committed, fmt.Errorf("parse %q: %w", firstLine(stmt), err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := e.Apply(ctx, tx, st, engine.ApplyOptions{})
		return err
	})
	if err != nil {
		return committed, fmt.Errorf("apply %q: %w", firstLine(stmt), err)
	}
	return time.Now(), nil
}

// defineJoin applies stmt and waits until target is live.
func defineJoin(ctx context.Context, e *runningEngine, pool *pgxpool.Pool, target, stmt string, timeout time.Duration) error {
	if _, err := applyTransform(ctx, e, pool, stmt); err != nil {
		return err
	}
	if err := e.AwaitLive(ctx, engine.TableName{Name: target}, timeout); err != nil {
		return fmt.Errorf("await live %s: %w", target, err)
	}
	return nil
}

// dropTarget pauses and drops a target (DROP needs a frozen transform).
func dropTarget(ctx context.Context, e *runningEngine, pool *pgxpool.Pool, target string) error {
	if err := e.Pause(ctx, pool, engine.TableName{Name: target}); err != nil {
		return fmt.Errorf("pause %s: %w", target, err)
	}
	if err := e.Drop(ctx, pool, engine.TableName{Name: target}); err != nil {
		return fmt.Errorf("drop %s: %w", target, err)
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return s
}

// execAll runs statements in order.
func execAll(ctx context.Context, pool *pgxpool.Pool, stmts ...string) error {
	for _, q := range stmts {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", firstLine(q), err)
		}
	}
	return nil
}

// topStatements prints the statements of database db that took the most
// execution time, when the lab runs with pg_stat_statements
// (TRELLIS_BENCH_PGSS=1): where a JOIN benchmark's time goes.
func topStatements(ctx context.Context, pool *pgxpool.Pool, label string, n int) {
	if os.Getenv("TRELLIS_BENCH_PGSS") != "1" {
		return
	}
	rows, err := pool.Query(ctx, `SELECT calls, total_exec_time, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 260)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC LIMIT $1`, n)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: pg_stat_statements: %v\n", label, err)
		return
	}
	defer rows.Close()
	fmt.Fprintf(os.Stderr, "\n%s: top statements by execution time (pg_stat_statements)\n", label)
	for rows.Next() {
		var calls, nrows int64
		var ms float64
		var q string
		if err := rows.Scan(&calls, &ms, &nrows, &q); err != nil {
			return
		}
		fmt.Fprintf(os.Stderr, "  %9.0f ms %7d calls %9d rows  %s\n", ms, calls, nrows, q)
	}
}

// resetStatements clears pg_stat_statements (when on) before a measured part.
func resetStatements(ctx context.Context, pool *pgxpool.Pool) {
	if os.Getenv("TRELLIS_BENCH_PGSS") == "1" {
		if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()"); err != nil {
			fmt.Fprintf(os.Stderr, "pg_stat_statements: %v\n", err)
		}
	}
}

// tableName is a target in the default target schema.
func tableName(name string) engine.TableName { return engine.TableName{Name: name} }
