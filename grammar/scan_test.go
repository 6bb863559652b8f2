package grammar

import (
	"errors"
	"testing"
)

// TestScanLexicalCases: Recognize and Parse read comments, strings, dollar
// quotes and names as Postgres's lexer does (through package sqlscan).
func TestScanLexicalCases(t *testing.T) {
	for _, c := range []struct {
		text    string
		trellis bool
		parses  bool
	}{
		{"-- x\rTRANSFORM t FROM s SELECT a AS b", true, true},
		{"-- x\r\nTRANSFORM t FROM s SELECT a AS b", true, true},
		{"-- x TRANSFORM t FROM s SELECT a AS b", false, false},
		{"/* a /* b */ c */ TRANSFORM t FROM s SELECT a AS b", true, true},
		{"/* a /* b */ TRANSFORM t FROM s SELECT a AS b", false, false},
		{"$q$ TRANSFORM t $q$", false, false},
		{"TRANSFORM t FROM s SELECT $q$ ; $x$ ' $q$ AS b", true, true},
		{`TRANSFORM t FROM s SELECT E'\'' AS b`, true, true},
		{"TRANSFORM t FROM s SELECT E'a'\n'\\'' AS b", true, true},
		{"TRANSFORM t FROM s SELECT a$b$ AS c", true, true},
		{`TRANSFORM t FROM s SELECT U&"x" AS c`, true, true},
		{`U&"x" TRANSFORM`, false, false},
		{"E'x' TRANSFORM", false, false},
	} {
		if got := Recognize(c.text); got != c.trellis {
			t.Errorf("Recognize(%q) = %v, want %v", c.text, got, c.trellis)
		}
		_, err := Parse(c.text)
		if got := !errors.Is(err, ErrNotTrellis); got != c.trellis {
			t.Errorf("Parse(%q) claims Trellis = %v, want %v (%v)", c.text, got, c.trellis, err)
		}
		if (err == nil) != c.parses {
			t.Errorf("Parse(%q): %v, want parsed = %v", c.text, err, c.parses)
		}
	}
}

// TestScanLexerTokens: the lexer's token boundaries are the scanner's.
func TestScanLexerTokens(t *testing.T) {
	for text, want := range map[string][]tokKind{
		"a$b$ x":              {tIdent, tIdent},
		"1$b$ x $b$":          {tNumber, tString},
		`E'\'' x`:             {tString, tIdent},
		"E'a'\n'\\'' x":       {tString, tIdent},
		"'a' 'b'":             {tString, tString},
		`U&"x" u&'y'`:         {tUIdent, tString},
		"-- c\rx /* /* */ */": {tIdent},
		"$1 $$a$$":            {tParam, tString},
	} {
		lx := &lexer{text: text, pm: newPosMap(text)}
		var got []tokKind
		for {
			tk, err := lx.next()
			if err != nil {
				t.Fatalf("%q: %v", text, err)
			}
			if tk.kind == tEOF {
				break
			}
			got = append(got, tk.kind)
		}
		if len(got) != len(want) {
			t.Errorf("%q: tokens %v, want %v", text, got, want)
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%q: tokens %v, want %v", text, got, want)
				break
			}
		}
	}
}
