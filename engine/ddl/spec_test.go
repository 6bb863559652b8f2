package ddl

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/")

// The catalog these tests resolve against, as sourceByOID and resolveItem
// would read it: columns in attribute order, their format_type, the key.
var (
	ordersSrc = grammar.Source{Schema: "public", Table: "orders",
		Columns: []string{"id", "customer_id", "price", "tax", "note", "region", "paid", "placed"}, Key: []string{"id"}}
	ordersTypes = map[string]string{"id": "integer", "customer_id": "integer", "price": "numeric(12,2)",
		"tax": "numeric(12,2)", "note": "text", "region": "text", "paid": "boolean", "placed": "date"}
	customers      = grammar.JoinedTable{Schema: "public", Table: "customers", Columns: []string{"id", "name", "region_id"}}
	customersTypes = map[string]string{"id": "integer", "name": "text", "region_id": "integer"}
	regions        = grammar.JoinedTable{Schema: "sales", Table: "regions", Columns: []string{"id", "label"}}
	regionsTypes   = map[string]string{"id": "integer", "label": "text"}
)

// source returns the resolved FROM table with the joined tables the
// statement names, looked up by table name.
func source(st *grammar.TransformStmt) *resolvedSource {
	src := &resolvedSource{Source: ordersSrc, types: ordersTypes}
	for _, j := range st.Joins {
		switch j.Table.Name {
		case "customers":
			src.Joined = append(src.Joined, customers)
			src.joinedTypes = append(src.joinedTypes, customersTypes)
		case "regions":
			src.Joined = append(src.Joined, regions)
			src.joinedTypes = append(src.joinedTypes, regionsTypes)
		}
	}
	return src
}

func compileForTest(t *testing.T, text string) ([]byte, error) {
	t.Helper()
	parsed, err := grammar.Parse(text)
	if err != nil {
		t.Fatalf("parse %q: %v", text, err)
	}
	st := parsed.(*grammar.TransformStmt)
	src := source(st)
	res, err := grammar.Resolve(st, &src.Source)
	if err != nil {
		return nil, err
	}
	spec, _, err := buildSpec(st, src, res, "public")
	if err != nil {
		return nil, err
	}
	if err := spec.Check("public"); err != nil {
		return nil, err
	}
	return json.MarshalIndent(spec, "", "  ")
}

// TestCompiledSpecGolden pins the compiled form of representative
// statements (testdata/specs/*.json, rewritten with -update): what the
// workers store, recompile and run, rendered from the syntax tree. A
// change to buildSpec is reviewed as a diff of these files.
func TestCompiledSpecGolden(t *testing.T) {
	cases := []struct{ name, text string }{
		{"enrich", `TRANSFORM order_totals FROM orders SELECT price + tax AS total, upper(note) AS loud`},
		{"field_reference", `TRANSFORM order_gross FROM orders SELECT price + tax AS total, total * 2 AS doubled`},
		{"qualified_target", `TRANSFORM reports.order_days FROM orders SELECT placed AS day, NOT paid AS unpaid`},
		{"aggregates", `TRANSFORM region_sales FROM orders GROUP BY region SELECT SUM(price) AS revenue, COUNT(*) AS n,
			COUNT(note) AS noted, AVG(tax) AS avg_tax, MIN(placed) AS first_day, MAX(placed) AS last_day,
			BOOL_AND(paid) AS all_paid, BOOL_OR(paid) AS any_paid`},
		{"composite_group", `TRANSFORM region_days FROM orders GROUP BY region, placed SELECT SUM(price) AS revenue`},
		{"join_snowflake", `TRANSFORM order_wide FROM orders o LEFT JOIN customers c ON c.id = o.customer_id
			JOIN sales.regions r ON r.id = c.region_id SELECT c.name AS customer, r.label AS region_label, o.price * 2 AS twice`},
		{"join_group", `TRANSFORM customer_revenue FROM orders o JOIN customers c ON c.id = o.customer_id
			GROUP BY c.name SELECT SUM(o.price) AS revenue`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := compileForTest(t, c.text)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "specs", c.name+".json")
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("compiled spec of %s differs from %s (run with -update if intended):\n%s", c.name, path, got)
			}
		})
	}
}

// TestCompiledFormulasAreRendered checks that what the workers run is the
// re-rendering of the syntax tree, never the user's spelling: odd spacing,
// case and comments do not reach the compiled form.
func TestCompiledFormulasAreRendered(t *testing.T) {
	a, err := compileForTest(t, `TRANSFORM t FROM orders SELECT price+tax AS total`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := compileForTest(t, "TRANSFORM t FROM orders SELECT PRICE   +  /* c */ tax AS total")
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("two spellings of one formula compiled differently:\n%s\n%s", a, b)
	}
	if strings.Contains(string(b), "/*") {
		t.Errorf("a comment reached the compiled form: %s", b)
	}
}

func TestCheckKeyType(t *testing.T) {
	cases := []struct {
		name    string
		row     keyTypeRow
		variant string // "" when allowed
	}{
		{"integer", keyTypeRow{typ: "integer", typtype: "b", category: "N", builtin: true, deterministicColl: true}, ""},
		{"text", keyTypeRow{typ: "text", typtype: "b", category: "S", builtin: true, collation: "C", deterministicColl: true}, ""},
		{"uuid", keyTypeRow{typ: "uuid", typtype: "b", category: "U", builtin: true, deterministicColl: true}, ""},
		{"domain", keyTypeRow{typ: "positive_int", typtype: "d", category: "N", builtin: false, deterministicColl: true}, "UnsupportedPrimaryKeyType"},
		{"enum", keyTypeRow{typ: "mood", typtype: "e", category: "E", builtin: false, deterministicColl: true}, "UnsupportedPrimaryKeyType"},
		{"array", keyTypeRow{typ: "integer[]", typtype: "b", category: "A", builtin: true, deterministicColl: true}, "UnsupportedPrimaryKeyType"},
		{"user base type", keyTypeRow{typ: "my_type", typtype: "b", category: "U", builtin: false, deterministicColl: true}, "UnsupportedPrimaryKeyType"},
		{"composite", keyTypeRow{typ: "pair", typtype: "c", category: "C", builtin: false, deterministicColl: true}, "UnsupportedPrimaryKeyType"},
		{"nondeterministic collation", keyTypeRow{typ: "text", typtype: "b", category: "S", builtin: true, collation: "und-ci"}, "NondeterministicKeyCollation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.row.name = "k"
			err := checkKeyType(c.row, "primary key column k of public.t", "UnsupportedPrimaryKeyType")
			if c.variant == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			pe, ok := pgerr.As(err)
			if !ok {
				t.Fatalf("want a *pgerr.Error of variant %s, got %v", c.variant, err)
			}
			if pe.Code != pgerr.FeatureNotSupported || pe.Variant != c.variant || pe.Hint == "" {
				t.Errorf("got %s %s (hint %q), want 0A000 %s with a hint", pe.Code, pe.Variant, pe.Hint, c.variant)
			}
		})
	}
}
