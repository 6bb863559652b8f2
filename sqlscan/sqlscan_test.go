package sqlscan

import "testing"

func TestSkipSpace(t *testing.T) {
	for _, c := range []struct {
		in  string
		end int
		ok  bool
	}{
		{"-- x\rA", 5, true},
		{"-- x\nA", 5, true},
		{"-- x A", 6, true},
		{" /* a /* b */ c */A", 18, true},
		{" /* a /* b */ A", 1, false},
		{"\t\v\fA", 3, true},
		{"/*/ */A", 6, true},
	} {
		end, ok := SkipSpace(c.in, 0)
		if end != c.end || ok != c.ok {
			t.Errorf("SkipSpace(%q) = %d %v, want %d %v", c.in, end, ok, c.end, c.ok)
		}
	}
}

func TestLex(t *testing.T) {
	for _, c := range []struct {
		in   string
		kind Kind
		end  int
		open bool
	}{
		{"abc def", Ident, 3, false},
		{"a$b$ x", Ident, 4, false},
		{"$b$ x $b$ y", String, 9, false},
		{"$b$ x $c$", String, 9, true},
		{"$$a$$", String, 5, false},
		{"$1 x", Param, 2, false},
		{"$1$a$", Param, 2, false},
		{"$x y", Other, 1, false},
		{"1$a$ y", Number, 1, false},
		{"1abc y", Number, 4, false},
		{"0x1F y", Number, 4, false},
		{"1.5e-3 y", Number, 6, false},
		{"1..2", Number, 1, false},
		{".5 y", Number, 2, false},
		{`'it''s' x`, String, 7, false},
		{`'\' x`, String, 3, false},
		{`E'\'' x`, String, 5, false},
		{"E'a'\n'\\'' x", String, 9, false},
		{"E'a' -- c\n'b' x", String, 13, false},
		{"E'a' 'b'", String, 4, false},
		{"E'a'\n/* */'b'", String, 4, false},
		{"B'01' x", String, 5, false},
		{"n'x' y", String, 4, false},
		{`U&'x' y`, String, 5, false},
		{`U&"x" y`, QuotedIdent, 5, false},
		{`"a""b" y`, QuotedIdent, 6, false},
		{`"ab`, QuotedIdent, 3, true},
		{"'ab", String, 3, true},
		{"U& x", Ident, 1, false},
		{";", Other, 1, false},
	} {
		tk := Lex(c.in, 0)
		if tk.Kind != c.kind || tk.End != c.end || tk.Open != c.open {
			t.Errorf("Lex(%q) = %+v, want kind %d end %d open %v", c.in, tk, c.kind, c.end, c.open)
		}
	}
}
