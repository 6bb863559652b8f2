package grammar

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// exampleCase is one "-- expect:" block of a testdata/*.sql file.
type exampleCase struct {
	Line   int
	Expect string
	Text   string
}

// readCases splits a testdata file into cases.
func readCases(t testing.TB, path string) []exampleCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []exampleCase
	var cur *exampleCase
	var buf []string
	flush := func() {
		if cur != nil {
			cur.Text = strings.TrimRight(strings.Join(buf, "\n"), "\n ")
			out = append(out, *cur)
		}
		buf = nil
	}
	for i, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "-- expect:"); ok {
			flush()
			cur = &exampleCase{Line: i + 1, Expect: strings.TrimSpace(rest)}
			continue
		}
		if cur == nil {
			continue
		}
		if strings.HasPrefix(line, "-- §") || (len(buf) > 0 && line == "" && false) {
			continue
		}
		if line == "" && len(buf) == 0 {
			continue
		}
		buf = append(buf, line)
	}
	flush()
	for i := range out {
		// A blank line ends a statement; the rest is commentary.
		if j := strings.Index(out[i].Text, "\n\n"); j >= 0 {
			out[i].Text = out[i].Text[:j]
		}
	}
	return out
}

// catalog is the fake catalog the examples resolve against.
type catalog struct {
	sources map[string]*Source
	defs    map[string]*TransformStmt // stored definitions, by bare target
}

func (c *catalog) source(q QualifiedName) *Source {
	s := c.sources[q.Name]
	if s == nil || q.Schema != "" && q.Schema != s.Schema {
		return nil
	}
	return s
}

// exampleCatalog is the schema of grammar spec §14.
func exampleCatalog() *catalog {
	return &catalog{sources: map[string]*Source{
		"orders":   {Schema: "public", Table: "orders", Columns: []string{"id", "g", "a", "b", "qty", "name"}, Key: []string{"id"}},
		"authors":  {Schema: "public", Table: "authors", Columns: []string{"id", "name"}, Key: []string{"id"}},
		"posts":    {Schema: "public", Table: "posts", Columns: []string{"id", "author"}, Key: []string{"id"}},
		"comments": {Schema: "public", Table: "comments", Columns: []string{"id", "post_id", "words"}, Key: []string{"id"}},
		"t18":      {Schema: "public", Table: "t18", Columns: []string{"id", "a2"}, Key: []string{"id"}},
	}, defs: map[string]*TransformStmt{}}
}

// overviewCatalog is the schema of grammar spec §1.
func overviewCatalog() *catalog {
	return &catalog{sources: map[string]*Source{
		"orders": {Schema: "public", Table: "orders", Columns: []string{"id", "customer_id", "region", "status", "amount", "tax", "qty", "placed_at"},
			Key: []string{"id"}},
		"customers":   {Schema: "public", Table: "customers", Columns: []string{"id", "name", "tier", "discount", "region_id"}, Key: []string{"id"}},
		"regions":     {Schema: "public", Table: "regions", Columns: []string{"id", "name"}, Key: []string{"id"}},
		"order_items": {Schema: "public", Table: "order_items", Columns: []string{"id", "order_id", "sku", "qty", "note"}, Key: []string{"id"}},
		"refunds":     {Schema: "public", Table: "refunds", Columns: []string{"id", "order_id", "amount"}, Key: []string{"id"}},
		"refund_view": {Schema: "public", Table: "refund_view", Columns: []string{"id", "order_id", "signed_amount"}, Key: []string{"id"}},
	}, defs: map[string]*TransformStmt{}}
}

// resolve is Resolve against the catalog: the FROM table and each joined
// table looked up by name (nil when one is missing, which is the engine's
// SourceTableNotFound).
func (c *catalog) resolve(s *TransformStmt) (*Resolution, bool, error) {
	src := c.source(s.Source)
	if src == nil {
		return nil, false, nil
	}
	withJoins := *src
	withJoins.Joined = nil
	for _, j := range s.Joins {
		js := c.source(j.Table)
		if js == nil {
			return nil, false, nil
		}
		withJoins.Joined = append(withJoins.Joined, JoinedTable{Schema: js.Schema, Table: js.Table, Columns: js.Columns})
	}
	res, err := Resolve(s, &withJoins)
	return res, true, err
}

// outcome runs the grammar's whole static pipeline on one statement: Parse,
// then Resolve (TRANSFORM) or ApplyAlter + Resolve (ALTER). Accepted transforms are stored so
// later ALTERs find them.
func (c *catalog) outcome(text string) (Statement, *Resolution, error) {
	st, err := Parse(text)
	if err != nil {
		return nil, nil, err
	}
	switch s := st.(type) {
	case *TransformStmt:
		res, found, err := c.resolve(s)
		if !found || err != nil {
			return st, nil, err
		}
		if _, exists := c.defs[s.Target.Name]; !exists {
			c.defs[s.Target.Name] = s
		}
		return st, res, nil
	case *AlterTransformStmt:
		def := c.defs[s.Target.Name]
		if def == nil {
			return st, nil, nil // TransformNotFound is the engine's
		}
		m, _, err := ApplyAlter(def, s)
		if err != nil {
			return st, nil, err
		}
		res, _, err := c.resolve(m)
		if err != nil {
			return st, nil, err
		}
		c.defs[s.Target.Name] = m
		return st, res, nil
	}
	return st, nil, nil
}

type goldenErr struct {
	SQLSTATE string `json:"sqlstate"`
	Class    string `json:"class"`
	Variant  string `json:"variant"`
	Position int    `json:"position"`
	Near     string `json:"near"`
	Message  string `json:"message"`
	Hint     string `json:"hint,omitempty"`
}

type goldenCase struct {
	Line      int        `json:"line"`
	Input     string     `json:"input"`
	Expect    string     `json:"expect"`
	Kind      string     `json:"kind,omitempty"`
	Canonical string     `json:"canonical,omitempty"`
	AST       any        `json:"ast,omitempty"`
	Error     *goldenErr `json:"error,omitempty"`
}

// near shows the text at a 1-based character position, for review.
func near(text string, pos int) string {
	r := []rune(text)
	if pos <= 0 || pos > len(r)+1 {
		return ""
	}
	s := string(r[pos-1 : min(len(r), pos-1+20)])
	if s == "" {
		return "<end>"
	}
	return s
}

func runGolden(t *testing.T, name string, cat *catalog) {
	cases := readCases(t, filepath.Join("testdata", name+".sql"))
	var out []goldenCase
	for _, c := range cases {
		st, res, err := cat.outcome(c.Text)
		g := goldenCase{Line: c.Line, Input: c.Text, Expect: c.Expect}
		if st != nil {
			g.Kind = string(st.Kind())
		}
		if err != nil {
			e, ok := pgerr.As(err)
			if !ok {
				t.Fatalf("line %d: error is not a *pgerr.Error: %v", c.Line, err)
			}
			g.Error = &goldenErr{SQLSTATE: e.Code, Class: e.Class, Variant: e.Variant, Position: e.Position,
				Near: near(c.Text, e.Position), Message: e.Message, Hint: e.Hint}
		} else {
			g.Canonical = Canonical(st)
			g.AST = summarize(st, res)
		}
		out = append(out, g)

		// The verdict the spec expects.
		f := strings.Fields(c.Expect)
		switch {
		case len(f) == 1 && f[0] == "ok", len(f) == 3 && f[0] == "engine":
			if err != nil {
				t.Errorf("line %d: %s: want accepted by the grammar (%s), got %v", c.Line, c.Text, c.Expect, err)
			}
		case len(f) == 2:
			if g.Error == nil {
				t.Errorf("line %d: %s: want %s, accepted", c.Line, c.Text, c.Expect)
			} else if g.Error.Variant != f[0] || g.Error.SQLSTATE != f[1] {
				t.Errorf("line %d: %s: want %s, got %s %s (%s)", c.Line, c.Text, c.Expect, g.Error.Variant, g.Error.SQLSTATE, g.Error.Message)
			} else if g.Error.Position <= 0 {
				t.Errorf("line %d: %s: error without position", c.Line, c.Text)
			}
		default:
			t.Fatalf("line %d: bad expectation %q", c.Line, c.Expect)
		}
		// Accepted statements render canonically and round-trip.
		if err == nil {
			checkRoundTrip(t, c.Text, st)
		}
	}
	got, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./grammar -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; run go test ./grammar -update and review the diff", path)
	}
}

func TestGoldenExamples(t *testing.T) { runGolden(t, "examples", exampleCatalog()) }
func TestGoldenOverview(t *testing.T) { runGolden(t, "overview", overviewCatalog()) }

// checkRoundTrip asserts Parse(Canonical(st)) equals st (positions aside)
// and that Canonical is a fixed point.
func checkRoundTrip(t interface {
	Helper()
	Fatalf(string, ...any)
}, input string, st Statement) {
	t.Helper()
	c1 := Canonical(st)
	st2, err := Parse(c1)
	if err != nil {
		t.Fatalf("canonical text of %q does not parse: %q: %v", input, c1, err)
	}
	if a, b := dump(st), dump(st2); a != b {
		t.Fatalf("round trip changed the tree\ninput: %q\ncanonical: %q\nbefore: %s\nafter:  %s", input, c1, a, b)
	}
	if c2 := Canonical(st2); c2 != c1 {
		t.Fatalf("canonical text is not a fixed point\ninput: %q\nfirst:  %q\nsecond: %q", input, c1, c2)
	}
}

// summarize is the stable AST summary stored in the golden files.
func summarize(st Statement, res *Resolution) any {
	type call struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
		Args int    `json:"args"`
		Pos  int    `json:"pos"`
	}
	type ref struct {
		Ref    string `json:"ref"`
		Pos    int    `json:"pos"`
		InAgg  bool   `json:"in_aggregate,omitempty"`
		Kind   string `json:"kind,omitempty"`
		Column string `json:"column,omitempty"`
		Field  string `json:"field,omitempty"`
		Rel    string `json:"rel,omitempty"`
		Item   int    `json:"item,omitempty"`
	}
	type field struct {
		Name    string `json:"name"`
		NamePos int    `json:"name_pos"`
		Pos     int    `json:"pos"`
		Formula string `json:"formula"`
		Calls   []call `json:"calls,omitempty"`
		Refs    []ref  `json:"refs,omitempty"`
	}
	fieldOf := func(name string, namePos Pos, e Expr, pos Pos, rf *ResolvedField) field {
		f := field{Name: name, NamePos: int(namePos), Pos: int(pos), Formula: RenderExpr(e)}
		for _, c := range Calls(e) {
			f.Calls = append(f.Calls, call{string(c.Kind), c.Name, c.Args, int(c.Pos)})
		}
		for i, u := range ColumnRefs(e) {
			r := ref{Ref: strings.Join(u.Ref.Parts, "."), Pos: int(u.Ref.Pos), InAgg: u.Agg != nil}
			if rf != nil {
				x := rf.Refs[i]
				r.Kind, r.Column, r.Field, r.Rel, r.Item = string(x.Kind), x.Column, x.Field, x.Rel, x.Item
			}
			f.Refs = append(f.Refs, r)
		}
		return f
	}
	m := map[string]any{"kind": string(st.Kind()), "pos": int(st.Position())}
	switch s := st.(type) {
	case *TransformStmt:
		m["target"] = map[string]any{"schema": s.Target.Schema, "name": s.Target.Name, "pos": int(s.Target.Pos)}
		m["source"] = map[string]any{"schema": s.Source.Schema, "name": s.Source.Name, "pos": int(s.Source.Pos)}
		if s.SourceAlias != nil {
			m["source_alias"] = s.SourceAlias.Name
		}
		var joins []any
		for i, j := range s.Joins {
			x := map[string]any{"kind": string(j.Kind), "table": qualified(j.Table), "pos": int(j.Pos)}
			if j.Alias != nil {
				x["alias"] = j.Alias.Name
			}
			var on []string
			for _, eq := range j.On {
				on = append(on, strings.Join(eq.Left.Parts, ".")+" = "+strings.Join(eq.Right.Parts, "."))
			}
			x["on"] = on
			if res != nil {
				r := res.Joins[i]
				x["resolved"] = fmt.Sprintf("item %d %v = item %d %v", r.Item, r.Columns, r.Parent, r.ParentColumns)
			}
			joins = append(joins, x)
		}
		if joins != nil {
			m["joins"] = joins
		}
		var keys []any
		for _, k := range s.GroupBy {
			keys = append(keys, map[string]any{"parts": k.Parts, "pos": int(k.Pos)})
		}
		if keys != nil {
			m["group_by"] = keys
		}
		var fs []field
		for i, f := range s.Fields {
			var rf *ResolvedField
			if res != nil {
				rf = &res.Fields[i]
			}
			fs = append(fs, fieldOf(f.Name, f.NamePos, f.Expr, f.Pos, rf))
		}
		m["fields"] = fs
		if res != nil {
			m["order"] = res.Order
		}
	case *RelationshipStmt:
		m["name"] = s.Name.Name
		m["from"] = s.FromTable.Name + "." + s.FromColumn.Name
		m["to"] = s.ToTable.Name + "." + s.ToColumn.Name
	case *PauseStmt, *ResumeStmt:
		var a TransformAddr
		if p, ok := s.(*PauseStmt); ok {
			a = p.Addr
		} else {
			a = s.(*ResumeStmt).Addr
		}
		m["target"] = a.Target.Name
		if a.Field != nil {
			m["field"] = a.Field.Name
		}
	case *DropTransformStmt:
		m["target"] = s.Target.Name
	case *DropRelationshipStmt:
		if s.Schema != nil {
			m["schema"] = s.Schema.Name
		}
		m["from_table"] = s.FromTable.Name
		m["name"] = s.Name.Name
	case *AlterTransformStmt:
		m["target"] = s.Target.Name
		var cs []any
		for _, c := range s.Clauses {
			x := map[string]any{"action": string(c.Action), "field": c.Field.Name, "pos": int(c.Pos)}
			if c.Expr != nil {
				x["formula"] = fieldOf(c.Field.Name, c.Field.Pos, c.Expr, c.ExprPos, nil)
			}
			cs = append(cs, x)
		}
		m["clauses"] = cs
	}
	return m
}

// dump renders a statement's tree without positions, for equality.
func dump(st Statement) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|", st.Kind())
	switch s := st.(type) {
	case *TransformStmt:
		fmt.Fprintf(&b, "%s.%s|%s.%s|", s.Target.Schema, s.Target.Name, s.Source.Schema, s.Source.Name)
		if s.SourceAlias != nil {
			fmt.Fprintf(&b, "as %q|", s.SourceAlias.Name)
		}
		if s.WithoutSourceIndex {
			b.WriteString("without source index|")
		}
		for _, j := range s.Joins {
			fmt.Fprintf(&b, "%s %s.%s", j.Kind, j.Table.Schema, j.Table.Name)
			if j.Alias != nil {
				fmt.Fprintf(&b, " as %q", j.Alias.Name)
			}
			for _, eq := range j.On {
				fmt.Fprintf(&b, " %q=%q", eq.Left.Parts, eq.Right.Parts)
			}
			b.WriteString("|")
		}
		for _, k := range s.GroupBy {
			fmt.Fprintf(&b, "k%q", k.Parts)
		}
		for _, f := range s.Fields {
			fmt.Fprintf(&b, "|%q=%s", f.Name, dumpExpr(f.Expr))
		}
	case *AlterTransformStmt:
		fmt.Fprintf(&b, "%q", s.Target.Name)
		for _, c := range s.Clauses {
			fmt.Fprintf(&b, "|%s %q", c.Action, c.Field.Name)
			if c.Expr != nil {
				b.WriteString(dumpExpr(c.Expr))
			}
		}
	default:
		b.WriteString(Canonical(st))
	}
	return b.String()
}

// dumpExpr prints an expression tree structurally, positions left out.
func dumpExpr(e Expr) string {
	if e == nil {
		return "nil"
	}
	var b strings.Builder
	var walk func(e Expr)
	walk = func(e Expr) {
		if e == nil {
			b.WriteString("nil")
			return
		}
		fmt.Fprintf(&b, "%T{", e)
		switch x := e.(type) {
		case *ColumnRef:
			fmt.Fprintf(&b, "%q", x.Parts)
		case *Const:
			fmt.Fprintf(&b, "%s %q", x.Kind, x.Value)
		case *TypeCast:
			fmt.Fprintf(&b, "%s %q %v ", x.Syntax, x.Type.Names, x.Type.ArrayBounds)
		case *OpExpr:
			fmt.Fprintf(&b, "%q ", x.Op)
		case *QuantifiedOp:
			fmt.Fprintf(&b, "%q %v ", x.Op, x.All)
		case *DistinctExpr:
			fmt.Fprintf(&b, "%v ", x.Not)
		case *InList:
			fmt.Fprintf(&b, "%v ", x.Not)
		case *LikeExpr:
			fmt.Fprintf(&b, "%s %v ", x.Kind, x.Not)
		case *BetweenExpr:
			fmt.Fprintf(&b, "%v %v ", x.Not, x.Symmetric)
		case *BoolExpr:
			fmt.Fprintf(&b, "%s ", x.Op)
		case *NullTest:
			fmt.Fprintf(&b, "%v ", x.Not)
		case *BoolTest:
			fmt.Fprintf(&b, "%s ", x.Test)
		case *FuncCall:
			fmt.Fprintf(&b, "%q %v %v %v ", x.Name, x.Star, x.Variadic, x.SQLSyntax)
		case *NamedArg:
			fmt.Fprintf(&b, "%q ", x.Name)
		case *CaseExpr:
			fmt.Fprintf(&b, "%v %d %v ", x.Arg != nil, len(x.Whens), x.Else != nil)
		case *MinMaxExpr:
			fmt.Fprintf(&b, "%v ", x.Greatest)
		case *CollateExpr:
			fmt.Fprintf(&b, "%q ", x.Collation)
		case *RowExpr:
			fmt.Fprintf(&b, "%v ", x.Explicit)
		case *SubscriptExpr:
			for _, ix := range x.Indices {
				fmt.Fprintf(&b, "[%v %v %v]", ix.Slice, ix.Lower != nil, ix.Upper != nil)
			}
		}
		for _, c := range Children(e) {
			walk(c)
			b.WriteString(",")
		}
		b.WriteString("}")
	}
	walk(e)
	return b.String()
}
