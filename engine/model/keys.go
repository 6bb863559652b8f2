package model

import (
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
)

// Key identity (engine §12.3): a key is its text rendering, compared
// byte-wise. One non-null column renders as format('%s', col); several
// columns, or a nullable identity, join escaped parts with U+001F, a NULL
// part being U+0001.

// KeyPlain reports whether a key of n columns uses the bare rendering.
func KeyPlain(n int, nullable bool) bool { return n == 1 && !nullable }

// KeySQL renders the key of the row under alias (already quoted) in SQL.
func KeySQL(alias string, cols []KeyCol, nullable bool) string {
	if KeyPlain(len(cols), nullable) {
		ref := alias + "." + base.Ident(cols[0].Name)
		if textCastIsOutput[cols[0].Type] {
			// The same text as format's %s (the type's output function),
			// without format's parse of its pattern on every row: about
			// 0.1 µs a row of a build's ledger inserts.
			return "(" + ref + ")::text"
		}
		return "format('%s', " + ref + ")"
	}
	parts := make([]string, len(cols))
	for i, c := range cols {
		ref := alias + "." + base.Ident(c.Name)
		parts[i] = "CASE WHEN num_nulls(" + ref + ") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', " +
			ref + "), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END"
	}
	return "(" + strings.Join(parts, " || chr(31) || ") + ")"
}

// textCastIsOutput lists the built-in key types whose cast to text is their
// output function (an I/O or binary coercion), so ::text renders a key as
// format('%s') does. Not bool (its cast says true, its output t), nor
// bpchar (the cast strips trailing blanks), nor inet (the cast shows the
// netmask), nor types whose output follows settings.
var textCastIsOutput = map[string]bool{
	"smallint": true, "integer": true, "bigint": true, "oid": true,
	"text": true, "character varying": true, "uuid": true,
}

// EncodeKey is the Go twin of KeySQL (nil = NULL part).
func EncodeKey(parts []*string, nullable bool) string {
	if KeyPlain(len(parts), nullable) {
		return *parts[0]
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(0x1f)
		}
		if p == nil {
			b.WriteByte(0x01)
			continue
		}
		for _, r := range []byte(*p) {
			switch r {
			case 0x1b:
				b.WriteString("\x1b\x1b")
			case 0x1f:
				b.WriteString("\x1bf")
			case 0x01:
				b.WriteString("\x1ba")
			default:
				b.WriteByte(r)
			}
		}
	}
	return b.String()
}

// DecodeKey splits a key into its n column texts (nil = NULL). A malformed
// key yields ok = false.
func DecodeKey(k string, n int, nullable bool) (parts []*string, ok bool) {
	if KeyPlain(n, nullable) {
		return []*string{&k}, true
	}
	raw := strings.Split(k, "\x1f")
	if len(raw) != n {
		return nil, false
	}
	parts = make([]*string, n)
	for i, r := range raw {
		if r == "\x01" {
			continue
		}
		var b strings.Builder
		for j := 0; j < len(r); j++ {
			c := r[j]
			if c == 0x01 {
				return nil, false
			}
			if c != 0x1b {
				b.WriteByte(c)
				continue
			}
			j++
			if j >= len(r) {
				return nil, false
			}
			switch r[j] {
			case 0x1b:
				b.WriteByte(0x1b)
			case 'f':
				b.WriteByte(0x1f)
			case 'a':
				b.WriteByte(0x01)
			default:
				return nil, false
			}
		}
		s := b.String()
		parts[i] = &s
	}
	return parts, true
}

// KeyLookup renders the predicate matching the row under alias to the
// unnested key parts u.p<i> (typed lookup for the index) and re-checks the
// rendering against u.k, so the key stays the identity even where the
// type's = is looser than its text (H9).
func KeyLookup(alias, u string, cols []KeyCol, nullable bool) string {
	var conds []string
	for i, c := range cols {
		ref := alias + "." + base.Ident(c.Name)
		p := u + "." + PartCol(i)
		eq := ref + " = " + p + "::" + c.Type
		if nullable {
			eq = "(" + eq + " OR (" + ref + " IS NULL AND " + p + " IS NULL))"
		}
		conds = append(conds, eq)
	}
	conds = append(conds, KeySQL(alias, cols, nullable)+" = "+u+".k COLLATE \"C\"")
	return strings.Join(conds, " AND ")
}

// PartCol names the i-th key part column of KeyArgs' unnest.
func PartCol(i int) string { return "p" + Itoa(i) }

// Itoa is strconv.Itoa for the small non-negative indexes of generated
// column names.
func Itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return Itoa(i/10) + digits[i%10:i%10+1]
}

// KeyArgs turns keys into unnest arguments: $1 keys, then one text[] per
// column. The SQL is "unnest($1::text[], $2::text[], ...) AS u(k, p0, ...)".
func KeyArgs(keys []string, cols []KeyCol, nullable bool) (args []any, unnest string, bad []string) {
	n := len(cols)
	cols2 := make([][]*string, n)
	good := make([]string, 0, len(keys))
	for _, k := range keys {
		parts, ok := DecodeKey(k, n, nullable)
		if !ok {
			bad = append(bad, k)
			continue
		}
		good = append(good, k)
		for i := range n {
			cols2[i] = append(cols2[i], parts[i])
		}
	}
	args = append(args, good)
	ps := []string{"$1::text[]"}
	names := []string{"k"}
	for i := range n {
		args = append(args, cols2[i])
		ps = append(ps, "$"+Itoa(i+2)+"::text[]")
		names = append(names, PartCol(i))
	}
	return args, "unnest(" + strings.Join(ps, ", ") + ") AS u(" + strings.Join(names, ", ") + ")", bad
}
