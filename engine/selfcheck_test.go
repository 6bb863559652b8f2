package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
)

// TestGoldenSelfCheckSQL pins the self-check's comparison SQL for every
// golden definition (a reviewed diff when a generator changes) and runs it,
// so each shape is valid SQL against its real tables.
func TestGoldenSelfCheckSQL(t *testing.T) {
	ctx := context.Background()
	goldenEach(t, func(t *testing.T, e *Engine, g goldenSpec) {
		pool := e.w.Pool
		target := goldenTarget(t, g.define)
		var id, version int64
		var raw []byte
		if err := pool.QueryRow(ctx, "SELECT id, version, compiled FROM trellis._definitions WHERE target_table = 'public.' || $1", target).
			Scan(&id, &version, &raw); err != nil {
			t.Fatal(err)
		}
		cd, err := e.w.CompiledFor(id, version, raw)
		if err != nil {
			t.Fatal(err)
		}
		paused := map[string]bool{}
		for _, p := range g.pause {
			paused[p] = true
		}
		cs := sqlgen.SelfCheck(cd.C, paused)
		var b strings.Builder
		for _, s := range []struct{ name, sql string }{{"page", cs.Page}, {"diff", cs.Diff}, {"groups of", cs.GroupsOf}} {
			if s.sql != "" {
				b.WriteString("-- " + target + ": self-check " + s.name + "\n" + strings.TrimSpace(s.sql) + ";\n\n")
			}
		}
		goldenCompare(t, filepath.Join("testdata", "selfcheck", g.name+".sql"), goldenNormalize(e, b.String()))
		// Run each statement once, as the self-check runs it: a snapshot
		// with the output settings pinned, a key valid for every golden key
		// type (each part "1").
		tk, nullable := cd.C.TargetIdentity()
		one := "1"
		parts := make([]*string, len(tk))
		for i := range parts {
			parts[i] = &one
		}
		key := model.EncodeKey(parts, nullable)
		err = pgx.BeginTxFunc(ctx, e.w.Workers, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sqlgen.PinOutputs()); err != nil {
				return err
			}
			for _, q := range []struct {
				sql  string
				args []any
			}{{cs.Page, cs.PageArgs(nil, 10)}, {cs.Diff, cs.DiffArgs([]string{key})}, {cs.GroupsOf, []any{[]string{key}}}} {
				if q.sql == "" {
					continue
				}
				rows, err := tx.Query(ctx, q.sql, q.args...)
				if err != nil {
					return err
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return fmt.Errorf("%s: %w", q.sql, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
