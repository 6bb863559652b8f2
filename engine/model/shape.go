package model

// Table shapes (D20): the target and ledger a definition needs, as the
// structured data the SECURITY DEFINER _create_table builds them from
// (names, type oids, typmods, collation names), never SQL text.

// ShapeCol is one column of a table shape (_create_table's "cols"). Type
// is the type name as compiled; OID, Mod and Coll are what the catalog
// function takes, resolved in the caller's session.
type ShapeCol struct {
	Name     string `json:"n"`
	Type     string `json:"-"`
	OID      uint32 `json:"t"`
	Mod      int32  `json:"m"`
	Coll     string `json:"c,omitempty"`
	NotNull  bool   `json:"nn,omitempty"`
	DefFalse bool   `json:"df,omitempty"`
}

// TableShape is what _create_table builds: columns, then a primary key, a
// UNIQUE NULLS NOT DISTINCT constraint, a unique index NULLS NOT DISTINCT
// and an index WHERE member, each by column names.
type TableShape struct {
	Cols   []ShapeCol `json:"cols"`
	PK     []string   `json:"pk,omitempty"`
	Unique []string   `json:"unnd,omitempty"`
	UIdx   []string   `json:"uidx,omitempty"`
	MIdx   []string   `json:"midx,omitempty"`
}

// Add appends a column of a type name (format_type's rendering, with a
// COLLATE clause where the engine compiled one).
func (s *TableShape) Add(name, typ string, notNull bool) {
	s.Cols = append(s.Cols, ShapeCol{Name: name, Type: typ, NotNull: notNull})
}

// Shapes are the target's and the ledger's shapes (grammar §11, engine
// §12.2), with type names as the engine resolved them.
func (c *Compiled) Shapes() (target, ledger *TableShape) {
	spec := &c.Spec
	target, ledger = &TableShape{}, &TableShape{}
	if !spec.IsAggregate() {
		var keys []string
		for _, k := range c.Key {
			target.Add(k.Name, k.FullType, !c.KeyNullable)
			keys = append(keys, k.Name)
		}
		for i, f := range spec.Fields {
			target.Add(f.Name, c.FieldTypes[i], false)
		}
		if c.KeyNullable {
			target.Unique = keys
		} else {
			target.PK = keys
		}
		ledger.Add("k", `text COLLATE "C"`, true)
		ledger.PK = []string{"k"}
		return target, ledger
	}
	for i, g := range spec.GroupBy {
		target.Add(g.Name, c.GroupTypes[i], false)
		target.UIdx = append(target.UIdx, g.Name)
	}
	for i, f := range spec.Fields {
		target.Add(f.Name, c.FieldTypes[i], false)
	}
	target.Add("__members", "bigint", true)
	for i, a := range c.Args {
		target.Add("__cnt"+Itoa(i), "bigint", true)
		if a.NeedSum {
			target.Add("__sum"+Itoa(i), a.SumType, true)
		}
		if a.NeedTrue {
			target.Add("__true"+Itoa(i), "bigint", true)
		}
	}
	ledger.Add("k", `text COLLATE "C"`, true)
	ledger.PK = []string{"k"}
	ledger.Cols = append(ledger.Cols, ShapeCol{Name: "member", Type: "boolean", NotNull: true, DefFalse: true})
	var lg []string
	for i := range spec.GroupBy {
		ledger.Add("g"+Itoa(i), c.GroupTypes[i], false)
		lg = append(lg, "g"+Itoa(i))
	}
	for i, a := range c.Args {
		ledger.Add("a"+Itoa(i), a.Type, false)
	}
	if c.NeedSrcKey {
		for i, k := range c.Key {
			ledger.Add("sk"+Itoa(i), k.FullType, false)
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
