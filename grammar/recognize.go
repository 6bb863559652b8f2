package grammar

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
// block comment.
func skipSpaceComments(t string, p int) int {
	for p < len(t) {
		c := t[p]
		switch {
		case isSpace(c):
			p++
		case c == '-' && p+1 < len(t) && t[p+1] == '-':
			for p < len(t) && t[p] != '\n' && t[p] != '\r' {
				p++
			}
		case c == '/' && p+1 < len(t) && t[p+1] == '*':
			depth := 0
			for {
				if p+1 >= len(t) {
					return -1
				}
				if t[p] == '/' && t[p+1] == '*' {
					depth++
					p += 2
				} else if t[p] == '*' && t[p+1] == '/' {
					p += 2
					depth--
					if depth == 0 {
						break
					}
				} else {
					p++
				}
			}
		default:
			return p
		}
	}
	return p
}

// word returns the unquoted identifier starting at p ("" if none, or if the
// letters start a string literal such as E'…' or U&"…", which the lexer
// reads as a literal) and its end.
func word(t string, p int) (string, int) {
	if p >= len(t) || !isIdentStart(t[p]) {
		return "", p
	}
	if p+1 < len(t) {
		c, c1 := t[p]|0x20, t[p+1]
		if c1 == '\'' && (c == 'b' || c == 'x' || c == 'n' || c == 'e') {
			return "", p
		}
		if c1 == '&' && c == 'u' && p+2 < len(t) && (t[p+2] == '\'' || t[p+2] == '"') {
			return "", p
		}
	}
	e := p + 1
	for e < len(t) && isIdentCont(t[e]) {
		e++
	}
	return t[p:e], e
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
