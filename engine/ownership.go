package engine

// D20: a transform's target and ledger are owned by the workers' role, so
// no tenant can attach a trigger, rule, default, check, generated column or
// expression index that would run as the workers when they write. The
// tables are made by the SECURITY DEFINER _define (catalog/functions/1_privileged.sql) from
// structured data (names, type oids, typmods, collation names), never SQL
// text; the defining role is the transform's owner in the catalog and is
// granted SELECT WITH GRANT OPTION. tamperSQL is the second wall: a table
// that grows such an object anyway (a superuser can add one) pauses the
// transform with a capture_failure before the next worker write.

import (
	"context"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// shapeCol is one column of a table shape (_create_table's "cols").
type shapeCol struct {
	Name     string `json:"n"`
	Type     string `json:"-"`
	OID      uint32 `json:"t"`
	Mod      int32  `json:"m"`
	Coll     string `json:"c,omitempty"`
	NotNull  bool   `json:"nn,omitempty"`
	DefFalse bool   `json:"df,omitempty"`
}

// tableShape is what _create_table builds: columns, then a primary key, a
// UNIQUE NULLS NOT DISTINCT constraint, a unique index NULLS NOT DISTINCT
// and an index WHERE member, each by column names.
type tableShape struct {
	Cols   []shapeCol `json:"cols"`
	PK     []string   `json:"pk,omitempty"`
	Unique []string   `json:"unnd,omitempty"`
	UIdx   []string   `json:"uidx,omitempty"`
	MIdx   []string   `json:"midx,omitempty"`
}

func (s *tableShape) add(name, typ string, notNull bool) {
	s.Cols = append(s.Cols, shapeCol{Name: name, Type: typ, NotNull: notNull})
}

// shapesOf is the target's and the ledger's shapes (grammar §11, engine
// §12.2), with type names as the engine resolved them.
func shapesOf(c *compiled) (target, ledger *tableShape) {
	spec := &c.Spec
	target, ledger = &tableShape{}, &tableShape{}
	if !spec.IsAggregate() {
		var keys []string
		for _, k := range c.Key {
			target.add(k.Name, k.FullType, !c.KeyNullable)
			keys = append(keys, k.Name)
		}
		for i, f := range spec.Fields {
			target.add(f.Name, c.FieldTypes[i], false)
		}
		if c.KeyNullable {
			target.Unique = keys
		} else {
			target.PK = keys
		}
		ledger.add("k", `text COLLATE "C"`, true)
		ledger.PK = []string{"k"}
		return target, ledger
	}
	for i, g := range spec.GroupBy {
		target.add(g.Name, c.GroupTypes[i], false)
		target.UIdx = append(target.UIdx, g.Name)
	}
	for i, f := range spec.Fields {
		target.add(f.Name, c.FieldTypes[i], false)
	}
	target.add("__members", "bigint", true)
	for i, a := range c.Args {
		target.add("__cnt"+model.Itoa(i), "bigint", true)
		if a.NeedSum {
			target.add("__sum"+model.Itoa(i), a.SumType, true)
		}
		if a.NeedTrue {
			target.add("__true"+model.Itoa(i), "bigint", true)
		}
	}
	ledger.add("k", `text COLLATE "C"`, true)
	ledger.PK = []string{"k"}
	ledger.Cols = append(ledger.Cols, shapeCol{Name: "member", Type: "boolean", NotNull: true, DefFalse: true})
	var lg []string
	for i := range spec.GroupBy {
		ledger.add("g"+model.Itoa(i), c.GroupTypes[i], false)
		lg = append(lg, "g"+model.Itoa(i))
	}
	for i, a := range c.Args {
		ledger.add("a"+model.Itoa(i), a.Type, false)
	}
	if c.NeedSrcKey {
		for i, k := range c.Key {
			ledger.add("sk"+model.Itoa(i), k.FullType, false)
		}
	}
	// Only fields recomputed from the members (MIN, MAX, …) read a group's
	// entries; for the rest the index is pure write cost.
	for _, r := range c.Recompute {
		if r {
			ledger.MIdx = lg
			break
		}
	}
	return target, ledger
}

// resolve turns each column's type name (format_type's rendering, as the
// engine compiled it) into the oid and typmod the catalog function takes:
// the caller's session parses "NULL::type" and the row description says.
func (s *tableShape) resolve(ctx context.Context, q Querier) error {
	exprs := make([]string, len(s.Cols))
	for i := range s.Cols {
		typ := s.Cols[i].Type
		if j := strings.LastIndex(typ, " COLLATE "); j >= 0 {
			s.Cols[i].Coll = typ[j+len(" COLLATE "):]
			typ = typ[:j]
		}
		exprs[i] = "NULL::" + typ
	}
	rows, err := q.Query(ctx, "SELECT "+strings.Join(exprs, ", ")+" LIMIT 0")
	if err != nil {
		return err
	}
	for i, fd := range rows.FieldDescriptions() {
		s.Cols[i].OID, s.Cols[i].Mod = fd.DataTypeOID, fd.TypeModifier
	}
	rows.Close()
	return rows.Err()
}

func nonNilCols(c []shapeCol) []shapeCol {
	if c == nil {
		return []shapeCol{}
	}
	return c
}
