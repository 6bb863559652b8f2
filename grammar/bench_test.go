package grammar

import (
	"strings"
	"testing"
)

// pgbench's statements (the TPC-B-like script) and the transactions' framing.
var pgbenchSQL = []string{
	"BEGIN;",
	"UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;",
	"SELECT abalance FROM pgbench_accounts WHERE aid = $1;",
	"UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2;",
	"UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2;",
	"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP);",
	"END;",
}

// ormQuery builds a ~10 KB ORM-style SELECT (quoted aliases, many columns,
// joins, a long IN list), preceded by the kind of comment ORMs add.
func ormQuery() string {
	var b strings.Builder
	b.WriteString("/* app:checkout controller:orders action:index */ SELECT ")
	for i := 0; i < 120; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`"orders"."column_` + itoa(i) + `" AS "t0_r` + itoa(i) + `"`)
	}
	b.WriteString(` FROM "orders" LEFT OUTER JOIN "customers" ON "customers"."id" = "orders"."customer_id" WHERE "orders"."id" IN (`)
	for i := 0; b.Len() < 10*1024-40; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(itoa(100000 + i))
	}
	b.WriteString(`) ORDER BY "orders"."id" DESC LIMIT 50`)
	return b.String()
}

func BenchmarkRecognize(b *testing.B) {
	mix := append(append([]string{}, pgbenchSQL...), ormQuery())
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if Recognize(mix[i%len(mix)]) {
			b.Fatal("ordinary SQL recognised as Trellis")
		}
		i++
	}
}

func BenchmarkRecognizeTrellis(b *testing.B) {
	q := "DROP TRANSFORM /* x */ order_view"
	b.ReportAllocs()
	for b.Loop() {
		if !Recognize(q) {
			b.Fatal("missed")
		}
	}
}

const typicalTransform = `TRANSFORM order_view FROM orders
SELECT customer_id AS customer_id,
       amount + tax AS gross,
       CASE WHEN status = 'shipped' THEN 1 ELSE 0 END AS shipped,
       round(amount * 0.92, 2) AS amount_eur;`

func BenchmarkParseTransform(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(typicalTransform); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonical(b *testing.B) {
	st, err := Parse(typicalTransform)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = Canonical(st)
	}
}

func BenchmarkRecognizeEach(b *testing.B) {
	cases := map[string]string{
		"select":     pgbenchSQL[2],
		"update":     pgbenchSQL[1],
		"insert":     pgbenchSQL[5],
		"begin":      pgbenchSQL[0],
		"orm10k":     ormQuery(),
		"droptable":  "DROP TABLE IF EXISTS t",
		"pgdroptran": "DROP TRANSFORM IF EXISTS FOR int LANGUAGE plpgsql",
	}
	for name, q := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if Recognize(q) {
					b.Fatal("recognised")
				}
			}
		})
	}
}
