package engine

import (
	"context"
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
		pool := e.pool
		target := goldenTarget(t, g.define)
		var id, version int64
		var raw []byte
		if err := pool.QueryRow(ctx, "SELECT id, version, compiled FROM trellis._definitions WHERE target_table = 'public.' || $1", target).
			Scan(&id, &version, &raw); err != nil {
			t.Fatal(err)
		}
		cd, err := e.compiledFor(id, version, raw)
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
		err = e.scSnapshot(ctx, func(tx pgx.Tx) error {
			if _, _, _, err := scPageRows(ctx, tx, cs, nil, 10); err != nil {
				return err
			}
			// A key valid for every golden key type: each part "1".
			tk, nullable := cd.C.TargetIdentity()
			one := "1"
			parts := make([]*string, len(tk))
			for i := range parts {
				parts[i] = &one
			}
			if _, err := scDiff(ctx, tx, cs, []string{model.EncodeKey(parts, nullable)}); err != nil {
				return err
			}
			_, _, err := e.inFlight(ctx, tx, cd, cs)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
