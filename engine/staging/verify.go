package staging

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/capture"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// D21: catalog rows are untrusted input. _define and _lifecycle_alter are
// callable by any role over a direct connection, and store the statement
// text and the compiled form the caller hands them; the compiled form holds
// SQL fragments the workers run. A row written by a session that already
// holds the workers' privileges (a superuser, a member of the workers' role,
// the engine's own pool) is trusted as written: it gains nothing by lying.
// Any other row is verified before the workers act on it: its statement is
// parsed again, must be exactly one TRANSFORM in canonical form, and is
// compiled again by the workers against the live catalog; the row is
// marked verified only if that compiled form equals the stored one, and a
// row that does not is paused with a capture_failure that says so. Until it
// is verified, no capture is installed for it, no build starts, pages defer
// its keys and the dump leaves its statement out.

// sameCompiled reports whether the stored compiled form raw is exactly c.
func sameCompiled(raw []byte, c *model.Compiled) (bool, error) {
	var stored model.Compiled
	if err := json.Unmarshal(raw, &stored); err != nil {
		return false, nil
	}
	a, err := json.Marshal(&stored)
	if err != nil {
		return false, err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return false, err
	}
	return bytes.Equal(a, b), nil
}

// verifyDefinitions verifies every applying definition not verified yet
// (see the top of this file) and pauses those whose row does not match
// their statement. It runs on the staging connection at the start of
// every full pass. acted: it verified or paused something.
func (e *Stager) verifyDefinitions(ctx context.Context, conn *pgx.Conn) (acted bool, err error) {
	type row struct {
		id     int64
		stmt   string
		raw    []byte
		srcOID uint32
		target string
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT d.id, d.definition_sql, d.compiled, d.source_oid, d.target_table
		FROM %s d WHERE NOT d.verified AND %s ORDER BY d.id`, e.Tbl("_definitions"), capture.ApplyingStatuses))
	if err != nil {
		return false, err
	}
	todo, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.stmt, &x.raw, &x.srcOID, &x.target)
	})
	if err != nil {
		return false, err
	}
	for _, d := range todo {
		why, err := e.VerifyOne(ctx, conn, d.stmt, d.raw, d.srcOID)
		if err != nil {
			if conn.IsClosed() || ctx.Err() != nil {
				return acted, err
			}
			e.LogFailure("verifying a definition failed; retried next pass", err, "definition", d.id)
			continue
		}
		acted = true
		if why == "" {
			if _, err := e.Cap.UpdateDefinition(ctx, conn, d.id, fmt.Sprintf(`UPDATE %s SET verified = true
				WHERE id = $1 AND definition_sql = $2 AND compiled = $3::jsonb`, e.Tbl("_definitions")), d.stmt, d.raw); err != nil {
				return acted, err
			}
			continue
		}
		f := &capture.CaptureFailure{Table: d.target,
			Error: fmt.Sprintf("the catalog row of transform %s does not match its statement as the workers compile it: %s; the workers do not run it", d.target, why),
			Remedy: fmt.Sprintf("define the transform through the proxy (PAUSE TRANSFORM, DROP TRANSFORM %s, then TRANSFORM again); "+
				"the catalog functions accept no compiled form of their own", d.target)}
		if held, err := e.Cap.PauseFailed(ctx, conn, d.id, f); err != nil || held {
			if err != nil {
				return acted, err
			}
			continue
		}
		e.Log.Warn("transform paused: its catalog row does not match its statement", "definition", d.id)
	}
	return acted, nil
}

// VerifyOne recompiles one definition in a transaction it rolls back (the
// formula check plants a temporary view) and says why its row does not
// match, "" if it does. Errors of the connection or context are returned;
// any other error of the recompile is a reason.
func (e *Stager) VerifyOne(ctx context.Context, conn *pgx.Conn, stmt string, raw []byte, srcOID uint32) (string, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite})
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx)
	// The install timeout, not the page's: a tenant holding a lock on her
	// source must not hold the staging connection (every role's seals)
	// for seconds at each pass; the row is verified at a later one.
	if err := worker.SetLockTimeout(ctx, tx, e.Cfg.InstallLockTimeout); err != nil {
		return "", err
	}
	c, err := e.DDL.Recompile(ctx, tx, stmt, srcOID)
	if err != nil {
		if base.Transient(err) || conn.IsClosed() {
			return "", err // a lock wait, a cancel, the connection: next pass
		}
		return "its statement does not compile (" + err.Error() + ")", nil
	}
	same, err := sameCompiled(raw, c)
	if err != nil {
		return "", err
	}
	if !same {
		return "its compiled form differs from the statement's", nil
	}
	return "", nil
}
