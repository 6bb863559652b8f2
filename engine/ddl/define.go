package ddl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Defined describes what Define did (grammar §10.1's row, in part).
type Defined struct {
	ID          int64
	TargetTable string // canonical schema.table
	SourceTable string
	Status      string
	Version     int64
	Kind        string
}

// typeNameSQL renders a type (oid $1, typmod $2) so that any session can
// resolve it: built-in types by format_type, others schema-qualified.
const typeNameSQL = `SELECT CASE WHEN t.typnamespace = 'pg_catalog'::regnamespace THEN format_type(t.oid, $2)
	ELSE format('%I.%I', n.nspname, t.typname) END,
	CASE WHEN t.typnamespace = 'pg_catalog'::regnamespace THEN format_type(t.oid, NULL)
	ELSE format('%I.%I', n.nspname, t.typname) END
	FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = $1`

// Define registers a definition inside the caller's transaction (D6): it
// validates spec against the live catalog as the caller sees it, creates the
// target and its ledger (owned by the calling role), records the definition
// waiting_to_backfill and wakes the staging worker at commit. Background work
// starts only once the transaction commits; a rollback undoes everything.
func (e *Executor) Define(ctx context.Context, q Querier, spec model.Spec) (d *Defined, err error) {
	if err := spec.Check(e.cfg.TargetSchema); err != nil {
		return nil, err
	}
	// All or nothing even on an autocommit handle: a definition row seen
	// without its reads would be built without capture. A pgx.Tx gets a
	// savepoint; a client's connection is already inside its transaction.
	q, done, err := Atomically(ctx, q)
	if err != nil {
		return nil, err
	}
	defer func() { err = done(err) }()
	c := &model.Compiled{Spec: spec}
	var workerRole string
	if err := q.QueryRow(ctx, fmt.Sprintf("SELECT %s._instance_worker_role()", base.Ident(e.cfg.Schema))).Scan(&workerRole); err != nil {
		return nil, fmt.Errorf("reading the Trellis instance marker in %q (was Migrate run?): %w", e.cfg.Schema, err)
	}

	// The source: a plain, logged, non-partitioned table with a key.
	srcOID, err := sourceTable(ctx, q, spec, c)
	if err != nil {
		return nil, err
	}

	var upstream *model.Compiled
	if c.Key, c.KeyNullable, upstream, err = e.keyOfReadTable(ctx, q, srcOID, c.SourceText); err != nil {
		return nil, err
	}
	if !spec.IsAggregate() {
		for _, k := range c.Key {
			for _, f := range spec.Fields {
				if f.Name == k.Name {
					return nil, pgerr.Newf(pgerr.DuplicateColumn, "field %q of %s has the name of a key column of %s", f.Name, spec.Target, c.SourceText).
						WithClass("validation", "DuplicateField")
				}
			}
		}
	}

	if err := e.targetFree(ctx, q, spec); err != nil {
		return nil, err
	}
	joined, err := e.resolveJoins(ctx, q, c)
	if err != nil {
		return nil, err
	}

	if err := e.resolveTypes(ctx, q, c); err != nil {
		return nil, err
	}

	tshape, lshape := c.Shapes()
	for _, sh := range []*tableShape{tshape, lshape} {
		if err := resolveShape(ctx, q, sh); err != nil {
			return nil, err
		}
	}
	if err := q.QueryRow(ctx, "SELECT format('%I.%I', $1::text, $2::text)", spec.Target.Schema, spec.Target.Name).Scan(&c.TargetText); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	d = &Defined{TargetTable: c.TargetText, SourceTable: c.SourceText, Status: "waiting_to_backfill", Version: 1, Kind: spec.Kind()}
	role := "source"
	if upstream != nil {
		role = "upstream_target"
	}
	cols, _ := json.Marshal(spec.ItemReads(0))
	// The catalog rows and the tables (owned by the workers' role, D20) are
	// written by a SECURITY DEFINER function that re-checks privileges for
	// the acting role (D9).
	ts, _ := json.Marshal(tshape)
	ls, _ := json.Marshal(lshape)
	err = q.QueryRow(ctx, fmt.Sprintf(`SELECT %s._define(current_user::regrole, $1, $2, $3, $4, $5, $6, $7::oid, $8, $9, $10, $11, $12)`,
		base.Ident(e.cfg.Schema)), spec.Target.Schema, spec.Target.Name, ts, ls, spec.Kind(), c.SourceText, srcOID, spec.Statement, raw, cols, role, joined).Scan(&d.ID)
	if err != nil {
		return nil, err
	}
	// Fields reading a field paused upstream are born paused (grammar §4.1).
	if upstream != nil {
		if _, err := q.Exec(ctx, fmt.Sprintf("SELECT %s._pause_inherit(current_user::regrole, $1)", base.Ident(e.cfg.Schema)), d.ID); err != nil {
			return nil, err
		}
	}
	// Delivered at commit; the staging worker also looks at least once a pass.
	if _, err := q.Exec(ctx, "SELECT pg_notify($1, 'define')", e.channel("wake")); err != nil {
		return nil, err
	}
	return d, nil
}

// sourceTable resolves spec's source, which must be a plain, logged,
// non-partitioned table (statement triggers capture nothing else), and
// sets c.SourceText to its canonical name.
func sourceTable(ctx context.Context, q Querier, spec model.Spec, c *model.Compiled) (uint32, error) {
	var srcOID uint32
	var relkind, persistence string
	var partition, inherits bool
	err := q.QueryRow(ctx, `
		SELECT c.oid, c.relkind::text, c.relpersistence::text, c.relispartition,
		       EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = c.oid OR inhparent = c.oid),
		       format('%I.%I', n.nspname, c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, spec.Source.Schema, spec.Source.Name).
		Scan(&srcOID, &relkind, &persistence, &partition, &inherits, &c.SourceText)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, pgerr.Newf(pgerr.UndefinedTable, "source table %s does not exist", spec.Source).
			WithClass("not_found", "SourceTableNotFound")
	}
	if err != nil {
		return 0, err
	}
	if relkind == "p" || partition || inherits || persistence != "p" || relkind != "r" {
		what := map[bool]string{true: "a partitioned table, a partition or part of an inheritance hierarchy"}[relkind == "p" || partition || inherits]
		if what == "" {
			if relkind != "r" {
				what = "not a plain table"
			} else {
				what = "unlogged or temporary"
			}
		}
		return 0, pgerr.Newf(pgerr.FeatureNotSupported, "source %s is %s; statement triggers cannot capture its changes", c.SourceText, what).
			WithClass("validation", "SourceNotChangeKeyed")
	}
	return srcOID, nil
}

// targetFree checks that spec's target can be created: a permanent schema,
// and neither it nor its ledger exists.
func (e *Executor) targetFree(ctx context.Context, q Querier, spec model.Spec) error {
	// A target in a temporary schema would vanish with the defining session
	// and leave a definition nothing can build (D21).
	if sch := spec.Target.Schema; sch == "pg_temp" || strings.HasPrefix(sch, "pg_temp_") || strings.HasPrefix(sch, "pg_toast_temp_") {
		return pgerr.Newf("3F000", "target %s is in a temporary schema", spec.Target).
			WithHint("name a target in a permanent schema, e.g. %s", pgx.Identifier{e.cfg.TargetSchema, spec.Target.Name}.Sanitize()).
			WithClass("validation", "TemporaryTarget")
	}

	// The target and its ledger must not exist.
	var taken string
	err := q.QueryRow(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname IN ($2, $3) LIMIT 1`,
		spec.Target.Schema, spec.Target.Name, spec.Target.Name+model.LedgerSuffix).Scan(&taken)
	if err == nil {
		variant := "TargetTableExists"
		if taken != spec.Target.Name {
			variant = "TargetTableSuffixCollision"
		}
		return pgerr.Newf(pgerr.DuplicateTable, "relation %s already exists", pgx.Identifier{spec.Target.Schema, taken}.Sanitize()).
			WithClass("conflict", variant).WithHint("choose another target name, or DROP TRANSFORM the existing one")
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	return nil
}

// keyOfReadTable is sourceKey for a table a definition reads (its source or
// a joined table), after the key-type and row-security rules every read
// table obeys.
func (e *Executor) keyOfReadTable(ctx context.Context, q Querier, oid uint32, text string) ([]model.KeyCol, bool, *model.Compiled, error) {
	if err := checkSourceKeyTypes(ctx, q, oid, text); err != nil {
		return nil, false, nil, err
	}
	if err := checkRowSecurity(ctx, q, oid, text); err != nil {
		return nil, false, nil, err
	}
	return e.sourceKey(ctx, q, oid, text)
}

// sourceKey is the key a definition over the source srcOID inherits: its
// primary key, or the groups of the aggregate target of this instance it
// is; upstream is that target's compiled form (empty for a 1-1 target).
func (e *Executor) sourceKey(ctx context.Context, q Querier, srcOID uint32, srcText string) (key []model.KeyCol, nullable bool, upstream *model.Compiled, err error) {
	key, err = primaryKey(ctx, q, srcOID)
	if err != nil {
		return nil, false, nil, err
	}
	if len(key) == 0 {
		var raw []byte
		err := q.QueryRow(ctx, fmt.Sprintf("SELECT %s._definition_of(current_user::regrole, $1::oid)", base.Ident(e.cfg.Schema)), srcOID).Scan(&raw)
		if err != nil {
			return nil, false, nil, err
		}
		if raw != nil {
			upstream = &model.Compiled{}
			if err := json.Unmarshal(raw, upstream); err != nil {
				return nil, false, nil, err
			}
			key, nullable = upstream.TargetIdentity()
		}
	}
	if len(key) == 0 {
		return nil, false, nil, pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "source table %s has no primary key", srcText).
			WithClass("validation", "NoPrimaryKey").WithHint("add a PRIMARY KEY to %s", srcText)
	}
	if upstream == nil {
		var isTarget bool
		if err := q.QueryRow(ctx, fmt.Sprintf("SELECT %s._is_target($1::oid)", base.Ident(e.cfg.Schema)), srcOID).Scan(&isTarget); err != nil {
			return nil, false, nil, err
		}
		if isTarget {
			upstream = &model.Compiled{}
		}
	}
	return key, nullable, upstream, nil
}

// keyColSelect renders key column a (type t in namespace tn) as a keyCol
// scans it: name, type without and with modifier and COLLATE clause.
const keyColSelect = `SELECT a.attname,
		  CASE WHEN t.typnamespace = 'pg_catalog'::regnamespace THEN format_type(t.oid, NULL)
		       ELSE format('%I.%I', tn.nspname, t.typname) END,
		  CASE WHEN t.typnamespace = 'pg_catalog'::regnamespace THEN format_type(t.oid, a.atttypmod)
		       ELSE format('%I.%I', tn.nspname, t.typname) END
		  || CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
		          THEN (SELECT format(' COLLATE %I.%I', cn.nspname, co.collname)
		                FROM pg_collation co JOIN pg_namespace cn ON cn.oid = co.collnamespace
		                WHERE co.oid = a.attcollation) ELSE '' END`

func scanKeyCol(r pgx.CollectableRow) (model.KeyCol, error) {
	var k model.KeyCol
	err := r.Scan(&k.Name, &k.Type, &k.FullType)
	return k, err
}

func primaryKey(ctx context.Context, q Querier, rel uint32) ([]model.KeyCol, error) {
	rows, err := q.Query(ctx, keyColSelect+`
		FROM pg_index i
		CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		JOIN pg_type t ON t.oid = a.atttypid JOIN pg_namespace tn ON tn.oid = t.typnamespace
		WHERE i.indrelid = $1 AND i.indisprimary ORDER BY k.ord`, rel)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanKeyCol)
}

// probeTypes runs "SELECT exprs FROM source LIMIT 0" (checking privileges
// and validity as the caller) and returns each column's type, full and base.
func probeTypes(ctx context.Context, q Querier, exprs []string, from, tail string) (full, baseTypes []string, err error) {
	if len(exprs) == 0 {
		return nil, nil, nil
	}
	rows, err := q.Query(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+from+tail+" LIMIT 0")
	if err != nil {
		return nil, nil, err
	}
	fds := rows.FieldDescriptions()
	type ft struct {
		oid uint32
		mod int32
	}
	fts := make([]ft, len(fds))
	for i, fd := range fds {
		fts[i] = ft{fd.DataTypeOID, fd.TypeModifier}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	for _, f := range fts {
		var fu, ba string
		if err := q.QueryRow(ctx, typeNameSQL, f.oid, f.mod).Scan(&fu, &ba); err != nil {
			return nil, nil, err
		}
		full = append(full, fu)
		baseTypes = append(baseTypes, ba)
	}
	return full, baseTypes, nil
}

var exactSum = map[string]bool{"smallint": true, "integer": true, "bigint": true, "numeric": true, "interval": true}
var intType = map[string]bool{"smallint": true, "integer": true, "bigint": true}

func (e *Executor) resolveTypes(ctx context.Context, q Querier, c *model.Compiled) error {
	src := c.FromSQL()
	spec := &c.Spec
	if !spec.IsAggregate() {
		exprs := make([]string, len(spec.Fields))
		for i, f := range spec.Fields {
			exprs[i] = "(" + f.Expr + ")"
		}
		full, _, err := probeTypes(ctx, q, exprs, src, "")
		if err != nil {
			return err
		}
		c.FieldTypes = full
		return nil
	}
	c.ResolveArgs()
	var exprs []string
	for _, g := range spec.GroupBy {
		exprs = append(exprs, "("+g.Expr+")")
	}
	for _, a := range c.Args {
		exprs = append(exprs, "("+a.Expr+")")
	}
	full, base, err := probeTypes(ctx, q, exprs, src, "")
	if err != nil {
		return err
	}
	ng := len(spec.GroupBy)
	c.GroupTypes, c.GroupBase = full[:ng], base[:ng]
	if err := checkGroupKeyTypes(ctx, q, spec, c.GroupBase); err != nil {
		return err
	}
	for i := range c.Args {
		c.Args[i].Type = full[ng+i]
	}
	argBase := base[ng:]
	c.Recompute = make([]bool, len(spec.Fields))
	for i, f := range spec.Fields {
		a := c.FieldArg[i]
		switch f.Agg {
		case model.AggSum:
			if exactSum[argBase[a]] {
				c.Args[a].NeedSum = true
			} else {
				c.Recompute[i] = true
			}
		case model.AggAvg:
			if intType[argBase[a]] {
				c.Args[a].NeedSum = true
			} else {
				c.Recompute[i] = true
			}
		case model.AggBoolAnd, model.AggBoolOr:
			c.Args[a].NeedTrue = true
		case model.AggMin, model.AggMax, model.AggBitAnd, model.AggBitOr:
			c.Recompute[i] = true
		case model.AggJSONBAgg:
			c.Recompute[i] = true
			c.NeedSrcKey = true
		}
	}
	// Field result types and the sums' types, as Postgres infers them.
	var aggs []string
	for _, f := range spec.Fields {
		aggs = append(aggs, sqlgen.AggCall(f))
	}
	var sumIdx []int
	for i, a := range c.Args {
		if a.NeedSum {
			aggs = append(aggs, "sum(("+a.Expr+"))")
			sumIdx = append(sumIdx, i)
		}
	}
	groupBy := make([]string, ng)
	for i := range groupBy {
		groupBy[i] = "(" + spec.GroupBy[i].Expr + ")"
	}
	full, _, err = probeTypes(ctx, q, aggs, src, " GROUP BY "+strings.Join(groupBy, ", "))
	if err != nil {
		return err
	}
	c.FieldTypes = full[:len(spec.Fields)]
	for j, i := range sumIdx {
		c.Args[i].SumType = full[len(spec.Fields)+j]
	}
	return nil
}

// Drop removes a definition, its target and its ledger in the caller's
// transaction. Capture no reader needs is removed by the next staging pass.
//
// The tables leave the caller's namespace at once, but their files are
// freed after the COMMIT: PostgreSQL unlinks a dropped table's files at
// commit, a cost that grows with the table, so they are moved into a trash
// schema that the staging worker drops (engine/staging/trash.go). Whether they may go is
// decided exactly as DROP TABLE decides it (a view on the target refuses
// the drop with PostgreSQL's own error), and a rollback leaves them where
// they were.
func (e *Executor) Drop(ctx context.Context, q Querier, target model.TableName) (err error) {
	if target.Schema == "" {
		target.Schema = e.cfg.TargetSchema
	}
	q, done, err := Atomically(ctx, q)
	if err != nil {
		return err
	}
	defer func() { err = done(err) }()
	// Ownership and dependents are checked, the row deleted and the tables
	// (the workers', D20) moved or dropped by a SECURITY DEFINER function.
	var raw []byte
	var trash *string
	err = q.QueryRow(ctx, fmt.Sprintf(`SELECT compiled, trash FROM %s._drop_transform(current_user::regrole, $1, $2)`, base.Ident(e.cfg.Schema)),
		target.Schema, target.Name).Scan(&raw, &trash)
	if err != nil {
		return dependentsError(err, pgx.Identifier{target.Schema, target.Name}.Sanitize())
	}
	if raw == nil {
		return pgerr.Newf(pgerr.UndefinedObject, "transform %s does not exist", target).WithClass("not_found", "TransformNotFound")
	}
	c := &model.Compiled{}
	if err := json.Unmarshal(raw, c); err != nil {
		return err
	}
	_, err = q.Exec(ctx, "SELECT pg_notify($1, 'drop')", e.channel("wake"))
	return err
}

// dependentsError keeps PostgreSQL's own refusal of a drop (its message
// names the object that depends on the target) with a hint that fits DROP
// TRANSFORM, which has no CASCADE.
func dependentsError(err error, target string) error {
	if pgerr.CodeOf(err) != pgerr.DependentObjectsStillExist {
		return err
	}
	out := &pgerr.Error{Code: pgerr.DependentObjectsStillExist, Err: err}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		out.Message, out.Detail = pgErr.Message, pgErr.Detail
	} else if pe, ok := pgerr.As(err); ok {
		out.Message, out.Detail = pe.Message, pe.Detail
	} else {
		return err
	}
	out.Hint = fmt.Sprintf("drop or alter the objects that depend on %s first; DROP TRANSFORM does not cascade", target)
	return out.WithClass("conflict", "DependentsBlockDrop")
}

// Atomically runs a multi-statement catalog change in one transaction when
// q can begin one (a pool or connection: a new transaction; a pgx.Tx: a
// savepoint). Other Queriers must already be inside a transaction.
func Atomically(ctx context.Context, q Querier) (Querier, func(error) error, error) {
	b, ok := q.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return q, func(err error) error { return err }, nil
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	return tx, func(err error) error {
		if err != nil {
			tx.Rollback(context.Background())
			return err
		}
		return tx.Commit(ctx)
	}, nil
}
