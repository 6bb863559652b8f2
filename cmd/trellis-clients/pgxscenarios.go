package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// runPgxTrellis is the Trellis side of pgx, which pgx's own suite cannot
// cover: Trellis statements in each of pgx's query exec modes, in batches
// alone and mixed with SQL, and in transactions. In-process, with the pgx
// this repository already depends on. Directly, only the SQL cases run.
func runPgxTrellis(ctx context.Context, r *runner, e env) (map[string]string, error) {
	res := map[string]string{}
	url := fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=disable", e.Host, e.Port)
	tag := e.Path[:1]
	t := func(name string) string { return "pgxt_" + tag + "_" + name }
	connect := func(mode pgx.QueryExecMode) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, err
		}
		cfg.DefaultQueryExecMode = mode
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return pgx.ConnectConfig(cctx, cfg)
	}
	run := func(name string, trellis bool, fn func(ctx context.Context) error) {
		if trellis && e.Path != "proxy" {
			res[name] = "skip"
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		if err := fn(cctx); err != nil {
			res[name] = "fail"
			fmt.Fprintf(os.Stderr, "   FAIL %s: %v\n", name, oneLine(err))
			r.why[name] = oneLine(err)
			return
		}
		res[name] = "pass"
	}
	awaitLive := func(ctx context.Context, c *pgx.Conn, target string) error {
		var s string
		if err := c.QueryRow(ctx, `SELECT trellis.await_live($1, 60000)`, target).Scan(&s); err != nil {
			return err
		}
		if s != "live" {
			return fmt.Errorf("%s: %s", target, s)
		}
		return nil
	}

	setup, err := connect(pgx.QueryExecModeCacheStatement)
	if err != nil {
		return res, err
	}
	defer setup.Close(context.Background())
	if _, err := setup.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s (id bigint PRIMARY KEY, name text NOT NULL);
		INSERT INTO %[1]s SELECT g, 'n' || g FROM generate_series(1, 10) g`, t("items"))); err != nil {
		return res, err
	}

	modes := []struct {
		name string
		mode pgx.QueryExecMode
	}{
		{"cache_statement", pgx.QueryExecModeCacheStatement},
		{"cache_describe", pgx.QueryExecModeCacheDescribe},
		{"describe_exec", pgx.QueryExecModeDescribeExec},
		{"exec", pgx.QueryExecModeExec},
		{"simple_protocol", pgx.QueryExecModeSimpleProtocol},
	}
	for _, m := range modes {
		run("pgx.sql_batch/"+m.name, false, func(ctx context.Context) error {
			c, err := connect(m.mode)
			if err != nil {
				return err
			}
			defer c.Close(context.Background())
			b := &pgx.Batch{}
			b.Queue(`SELECT 1`)
			b.Queue(`SELECT count(*) FROM ` + t("items"))
			return c.SendBatch(ctx, b).Close()
		})
		run("pgx.transform/"+m.name, true, func(ctx context.Context) error {
			c, err := connect(m.mode)
			if err != nil {
				return err
			}
			defer c.Close(context.Background())
			target := t("up_" + m.name)
			var kind string
			if err := c.QueryRow(ctx, `TRANSFORM `+target+` FROM `+t("items")+` SELECT upper(name) AS uname`).Scan(&kind, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil); err != nil {
				return err
			}
			if kind != "transform_defined" {
				return fmt.Errorf("kind %q", kind)
			}
			return awaitLive(ctx, c, target)
		})
		run("pgx.status_query/"+m.name, true, func(ctx context.Context) error {
			c, err := connect(m.mode)
			if err != nil {
				return err
			}
			defer c.Close(context.Background())
			var n int
			return c.QueryRow(ctx, `SELECT count(*) FROM trellis.status WHERE target LIKE $1`, "pgxt_%").Scan(&n)
		})
		run("pgx.batch_transform_alone/"+m.name, true, func(ctx context.Context) error {
			c, err := connect(m.mode)
			if err != nil {
				return err
			}
			defer c.Close(context.Background())
			b := &pgx.Batch{}
			b.Queue(`TRANSFORM ` + t("alone_"+m.name) + ` FROM ` + t("items") + ` SELECT length(name) AS len`)
			return c.SendBatch(ctx, b).Close()
		})
		run("pgx.batch_sql_and_transform/"+m.name, true, func(ctx context.Context) error {
			c, err := connect(m.mode)
			if err != nil {
				return err
			}
			defer c.Close(context.Background())
			src, target := t("src_"+m.name), t("mix_"+m.name)
			// The table exists before the batch: pgx's preparing modes
			// describe every statement before running the first.
			if _, err := c.Exec(ctx, `CREATE TABLE `+src+` (id bigint PRIMARY KEY, v text)`); err != nil {
				return err
			}
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO ` + src + ` VALUES (1, 'a')`)
			b.Queue(`TRANSFORM ` + target + ` FROM ` + src + ` SELECT upper(v) AS uv`)
			b.Queue(`SELECT count(*) FROM trellis.status WHERE target = '` + target + `'`)
			if err := c.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			return awaitLive(ctx, c, target)
		})
	}

	run("pgx.tx_transform_first", true, func(ctx context.Context) error {
		c, err := connect(pgx.QueryExecModeCacheStatement)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx, `TRANSFORM `+t("txfirst")+` FROM `+t("items")+` SELECT name || '!' AS bang`); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		return awaitLive(ctx, c, t("txfirst"))
	})

	run("pgx.batch_error_skips_transform", true, func(ctx context.Context) error {
		c, err := connect(pgx.QueryExecModeCacheStatement)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		b := &pgx.Batch{}
		b.Queue(`SELECT 1/0`)
		b.Queue(`TRANSFORM ` + t("skipped") + ` FROM ` + t("items") + ` SELECT name AS n2`)
		err = c.SendBatch(ctx, b).Close()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22012" {
			return fmt.Errorf("want 22012 from the batch, got %v", err)
		}
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM trellis.status WHERE target = $1`, t("skipped")).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return errors.New("the Trellis statement after the failed one ran")
		}
		return nil
	})
	return res, nil
}

func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
