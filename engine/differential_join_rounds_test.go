package engine

// The closing rounds of a JOIN program (differential_join_test.go).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// dimensionRound is one of a JOIN program's closing rounds: a change of
// rows of one table that other rows point at (their read columns, the
// rows deleted, their keys changed, one of their own join columns
// re-pointed, or the table truncated), or a row re-pointed at a row
// updated at the same instant, in either commit order; the caller then
// awaits a token and compares at once.
func (dr *diffRun) dimensionRound(r *rand.Rand) (string, error) {
	ctx := context.Background()
	t := dr.tables[r.IntN(len(dr.tables))]
	x := dr.tables[r.IntN(len(dr.tables))] // a table pointing at t
	kc := strings.Join(dr.keys[t], ", ")
	var tk []string
	for _, k := range dr.keys[t] {
		tk = append(tk, "t."+k)
	}
	refs := "(" + strings.Join(dr.fkCols(t), ", ") + ")"
	pointed := fmt.Sprintf(`SELECT %s FROM %s t WHERE (%s) IN (SELECT %s FROM %s WHERE %s IS NOT NULL) ORDER BY random() LIMIT 3`,
		strings.Join(tk, ", "), t, strings.Join(tk, ", "), strings.Join(dr.fkCols(t), ", "), x, strings.Join(dr.fkCols(t), " IS NOT NULL AND "))
	in := "(" + kc + ") IN (" + pointed + ")"
	var q string
	switch op := r.IntN(12); {
	case op < 2:
		q = "UPDATE " + t + " SET g1 = coalesce(g1, '') || 'x', g2 = coalesce(g2, 0) + 1, n = coalesce(n, 0) + 1, i = coalesce(i, 0) + 1, b = NOT coalesce(b, false) WHERE " + in
	case op < 4:
		q = "DELETE FROM " + t + " WHERE " + in
	case op < 6:
		set := "id = id + 1000"
		switch {
		case len(dr.keys[t]) == 2:
			set = "k2 = k2 || '~'"
		case dr.isTextKey(t):
			set = "id = id || '~'"
		}
		q = "UPDATE " + t + " SET " + set + " WHERE " + in
	case op < 8: // a snowflake edge: the pointed-at rows point elsewhere
		v := dr.tables[r.IntN(len(dr.tables))]
		var vk []string
		for _, k := range dr.keys[v] {
			vk = append(vk, "v."+k)
		}
		q = "UPDATE " + t + " SET " + "(" + strings.Join(dr.fkCols(v), ", ") + ") = (SELECT " + strings.Join(vk, ", ") + " FROM " + v +
			" v ORDER BY random() LIMIT 1) WHERE " + in
		if len(dr.fkCols(v)) == 1 {
			q = "UPDATE " + t + " SET " + dr.fkCols(v)[0] + " = (SELECT " + vk[0] + " FROM " + v + " v ORDER BY random() LIMIT 1) WHERE " + in
		}
	case op < 11: // re-point rows of x at a row of t as that row changes
		var target []any
		rows, err := dr.pool.Query(ctx, "SELECT "+strings.Join(tk, ", ")+" FROM "+t+" t ORDER BY random() LIMIT 1")
		if err != nil {
			return "", err
		}
		for rows.Next() {
			target, err = rows.Values()
		}
		rows.Close()
		if err != nil || target == nil {
			return "no row to point at", err
		}
		var ps, eq []string
		for i, k := range dr.keys[t] {
			ps = append(ps, "$"+strconv.Itoa(i+1))
			eq = append(eq, k+" = $"+strconv.Itoa(i+1))
		}
		fact := "UPDATE " + x + " SET " + refs + " = ROW(" + strings.Join(ps, ", ") + ") WHERE random() < 0.2"
		if len(ps) == 1 {
			fact = "UPDATE " + x + " SET " + dr.fkCols(t)[0] + " = $1 WHERE random() < 0.2"
		}
		dim := "UPDATE " + t + " SET g1 = coalesce(g1, '') || 'y', n = coalesce(n, 0) + 2, i = coalesce(i, 0) + 2 WHERE " + strings.Join(eq, " AND ")
		first, second := fact, dim
		if r.IntN(2) == 0 {
			first, second = dim, fact
		}
		// Gaps past a page's pickup too: the second commit then lands while
		// the first one's page is under way (where a read outside the
		// ledger lock goes stale).
		gap := time.Duration(r.IntN(40)) * time.Millisecond
		if r.IntN(2) == 0 {
			gap = time.Duration(40+r.IntN(360)) * time.Millisecond
		}
		for _, s := range []string{first, second} {
			if _, err := dr.pool.Exec(ctx, s, target...); err != nil && !retryable(err) {
				return "", fmt.Errorf("%s: %w", s, err)
			}
			time.Sleep(gap)
		}
		return fmt.Sprintf("%s; then %s (gap %s) %v", first, second, gap, target), nil
	default: // truncated, then filled again by another transaction
		for _, s := range []string{"DROP TABLE IF EXISTS keep_rows", "CREATE TABLE keep_rows AS SELECT * FROM " + t, "TRUNCATE " + t,
			"INSERT INTO " + t + " SELECT * FROM keep_rows WHERE random() < 0.8", "DROP TABLE keep_rows"} {
			if _, err := dr.pool.Exec(ctx, s); err != nil {
				return "", fmt.Errorf("%s: %w", s, err)
			}
		}
		return "TRUNCATE " + t + " and refill", nil
	}
	if _, err := dr.pool.Exec(ctx, q); err != nil && !retryable(err) {
		return "", fmt.Errorf("%s: %w", q, err)
	}
	return q, nil
}

func retryable(err error) bool {
	switch pgerr.CodeOf(err) {
	case "40P01", "23505", "40001", "55P03":
		return true
	}
	return false
}

// edgeRounds are a JOIN program's last closing rounds, three per distinct
// edge its definitions join through (a table's rows matched through
// another's join columns): a few rows pointed at one row, the matched
// rows' every read column changed, then (after every edge's) two of them
// deleted. A fan-out that misses an edge, or the rows that moved away,
// leaves a stale row the compare after the round sees; the random rounds
// before may leave an edge matching nothing (a planted skipped edge went
// unnoticed in one run of four).
func (dr *diffRun) edgeRounds() []string {
	var qs, gone []string
	seen := map[[2]string]bool{}
	for _, d := range dr.defs {
		for i, it := range d.items {
			if i == 0 || it.kind != "table" && it.kind != "copy" {
				continue
			}
			par := d.items[it.parent]
			if par.kind != "table" && par.kind != "copy" {
				continue // matched by keys, not join columns: the random rounds' re-keys cover it
			}
			t, x := it.base, par.base
			if seen[[2]string{t, x}] {
				continue
			}
			seen[[2]string{t, x}] = true
			fk := dr.fkCols(t)
			var tk []string
			for _, k := range dr.keys[t] {
				tk = append(tk, "t."+k)
			}
			// First a few rows of x pointed at a row of t, so the edge
			// matches something whatever the random program left.
			var xk []string
			for _, k := range dr.keys[x] {
				xk = append(xk, "x."+k)
			}
			point := "UPDATE " + x + " x SET (" + strings.Join(fk, ", ") + ") = (SELECT " + strings.Join(tk, ", ") + " FROM " + t + " t ORDER BY 1 LIMIT 1)"
			if len(fk) == 1 {
				point = "UPDATE " + x + " x SET " + fk[0] + " = (SELECT " + tk[0] + " FROM " + t + " t ORDER BY 1 LIMIT 1)"
			}
			qs = append(qs, point+" WHERE ("+strings.Join(xk, ", ")+") IN (SELECT "+strings.Join(xk, ", ")+" FROM "+x+" x ORDER BY 1 DESC LIMIT 3)")
			matched := fmt.Sprintf("(%s) IN (SELECT %s FROM %s WHERE %s IS NOT NULL", strings.Join(tk, ", "), strings.Join(fk, ", "), x,
				strings.Join(fk, " IS NOT NULL AND "))
			qs = append(qs, `UPDATE `+t+` t SET g1 = coalesce(g1, '') || 'e', g2 = coalesce(g2, 0) + 3, n = coalesce(n, 0) + 3,
				i = coalesce(i, 0) + 3, b = NOT coalesce(b, false), j = coalesce(j, '{}') || '{"e": 1}' WHERE `+matched+")")
			// Then matched rows gone: a fan-out reading only rows that exist
			// now misses the rows that pointed at them.
			gone = append(gone, "DELETE FROM "+t+" t WHERE "+matched+" ORDER BY 1 LIMIT 2)")
		}
	}
	return append(qs, gone...)
}
