package grammar

import "github.com/trellis-proxy/trellis-proxy/sqlscan"

// Recognize reports whether text is a Trellis statement, deciding from its
// leading words after whitespace and comments, compared case-insensitively
// (grammar spec §2.1, D5). It never parses, never allocates and, for ordinary
// SQL, looks at a few bytes only.
//
// It is true for TRANSFORM, RELATIONSHIP, PAUSE, RESUME, ALTER TRANSFORM,
// DROP RELATIONSHIP, and DROP TRANSFORM unless the next word is IF or FOR
// (Postgres's own DROP TRANSFORM [IF EXISTS] FOR type LANGUAGE lang).
// CREATE TRANSFORM and everything else is Postgres's.
//
// Contract with Parse: Recognize(text) == !errors.Is(err, ErrNotTrellis)
// where _, err := Parse(text). A text Recognize accepts is Trellis even when
// Parse then refuses it with a syntax error (PAUSE RELATIONSHIP x.y).
func Recognize(text string) bool {
	_, ok := Classify(text)
	return ok
}

// Classify is Recognize that also names the statement kind from the leading
// words (for command tags and routing), without parsing.
func Classify(text string) (Kind, bool) {
	p := skipSpaceComments(text, 0)
	if p < 0 || p >= len(text) {
		return "", false
	}
	// Cheap first-byte filter: every Trellis statement starts with one of
	// these letters; SELECT/INSERT/UPDATE/BEGIN… leave here.
	switch text[p] | 0x20 {
	case 't', 'r', 'p', 'a', 'd':
	default:
		return "", false
	}
	w, e := word(text, p)
	switch {
	case eqFold(w, "transform"):
		return KindTransform, true
	case eqFold(w, "relationship"):
		return KindRelationship, true
	case eqFold(w, "pause"):
		return KindPause, true
	case eqFold(w, "resume"):
		return KindResume, true
	case eqFold(w, "alter"):
		w2, _ := nextWord(text, e)
		if eqFold(w2, "transform") {
			return KindAlter, true
		}
	case eqFold(w, "drop"):
		w2, e2 := nextWord(text, e)
		if eqFold(w2, "relationship") {
			return KindDrop, true
		}
		if !eqFold(w2, "transform") {
			return "", false
		}
		p3 := skipSpaceComments(text, e2)
		if p3 < 0 || p3 >= len(text) {
			return KindDrop, true
		}
		w3, _ := word(text, p3)
		if !(eqFold(w3, "if") || eqFold(w3, "for")) {
			return KindDrop, true
		}
	}
	return "", false
}

// skipSpaceComments returns the offset of the first byte at or after p that
// is not whitespace or inside a comment, or -1 inside an unterminated
// block comment (the shared scanner's rules, as Postgres's lexer).
func skipSpaceComments(t string, p int) int {
	e, ok := sqlscan.SkipSpace(t, p)
	if !ok {
		return -1
	}
	return e
}

// word returns the unquoted identifier starting at p ("" if the token there
// is anything else, such as E'…' or U&"…") and its end.
func word(t string, p int) (string, int) {
	if p >= len(t) || !isIdentStart(t[p]) {
		return "", p
	}
	tk := sqlscan.Lex(t, p)
	if tk.Kind != sqlscan.Ident {
		return "", p
	}
	return t[p:tk.End], tk.End
}

// nextWord skips whitespace and comments after p and returns the word there.
func nextWord(t string, p int) (string, int) {
	p = skipSpaceComments(t, p)
	if p < 0 {
		return "", len(t)
	}
	return word(t, p)
}

// eqFold compares an ASCII word with a lower-case keyword.
func eqFold(w, kw string) bool {
	if len(w) != len(kw) {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != kw[i] {
			return false
		}
	}
	return true
}
