// Package sqlscan finds the lexical structure of SQL text as PostgreSQL's
// lexer (src/backend/parser/scan.l) does, with standard_conforming_strings
// on: where whitespace and comments end, and where identifiers, strings,
// quoted identifiers, dollar quotes, numbers and parameters start and end.
// The router's prefilter and splitter and the grammar's recognizer and
// lexer all use it, so they cannot disagree on where a statement's words
// are. It imports nothing of the module.
package sqlscan

import "strings"

// Kind is the class of a lexical element.
type Kind uint8

const (
	EOF         Kind = iota
	Ident            // unquoted identifier or keyword
	QuotedIdent      // "…" or U&"…"
	String           // '…', E'…', B'…', X'…', N'…', U&'…', $tag$…$tag$
	Number           // numeric literal, with any trailing junk Postgres rejects
	Param            // $n
	Other            // any other single byte (operator character, punctuation)
)

// Token is one lexical element: s[Start:End]. Open marks a string or
// quoted identifier that runs to the end of the text unterminated.
type Token struct {
	Kind       Kind
	Start, End int
	Open       bool
}

// IsSpace is scan.l's {space} (\v included, as since PostgreSQL 16).
func IsSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// IsIdentStart is scan.l's {ident_start}: any byte >= 0x80 counts.
func IsIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

// IsIdentCont is scan.l's {ident_cont}: '$' continues an identifier.
func IsIdentCont(c byte) bool {
	return IsIdentStart(c) || c >= '0' && c <= '9' || c == '$'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// SkipSpace returns the offset of the first byte at or after i that is
// neither whitespace nor inside a comment. A "--" comment ends at '\n' or
// '\r'; "/* */" comments nest. ok is false for an unterminated block
// comment, and end is then that comment's start.
func SkipSpace(s string, i int) (end int, ok bool) {
	for i < len(s) {
		c := s[i]
		switch {
		case IsSpace(c):
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			i = LineCommentEnd(s, i)
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			e, closed := BlockCommentEnd(s, i)
			if !closed {
				return i, false
			}
			i = e
		default:
			return i, true
		}
	}
	return i, true
}

// LineCommentEnd returns the offset of the newline ending the "--" comment
// at s[i] (len(s) when none).
func LineCommentEnd(s string, i int) int {
	for i < len(s) && s[i] != '\n' && s[i] != '\r' {
		i++
	}
	return i
}

// BlockCommentEnd returns the end of the "/*" comment at s[i], nesting as
// Postgres nests them; closed is false when it runs to the end.
func BlockCommentEnd(s string, i int) (end int, closed bool) {
	depth := 0
	for i+1 < len(s) {
		switch {
		case s[i] == '/' && s[i+1] == '*':
			depth++
			i += 2
		case s[i] == '*' && s[i+1] == '/':
			depth--
			i += 2
			if depth == 0 {
				return i, true
			}
		default:
			i++
		}
	}
	return len(s), false
}

// Next skips whitespace and comments from i and returns the token there
// (Kind EOF at the end of the text or in an unterminated block comment,
// with Start where the comment opens and Open set).
func Next(s string, i int) Token {
	p, ok := SkipSpace(s, i)
	if !ok {
		return Token{Kind: EOF, Start: p, End: len(s), Open: true}
	}
	return Lex(s, p)
}

// Lex returns the token starting at s[i], which must not be whitespace or
// a comment start.
func Lex(s string, i int) Token {
	if i >= len(s) {
		return Token{Kind: EOF, Start: i, End: i}
	}
	c := s[i]
	var c1, c2 byte
	if i+1 < len(s) {
		c1 = s[i+1]
	}
	if i+2 < len(s) {
		c2 = s[i+2]
	}
	switch {
	case c == '\'':
		return str(s, i, i, false)
	case c == '"':
		return quotedIdent(s, i, i)
	case c1 == '\'' && (c|0x20 == 'b' || c|0x20 == 'x' || c|0x20 == 'n'):
		return str(s, i, i+1, false)
	case c1 == '\'' && c|0x20 == 'e':
		return str(s, i, i+1, true)
	case c|0x20 == 'u' && c1 == '&' && c2 == '\'':
		return str(s, i, i+2, false)
	case c|0x20 == 'u' && c1 == '&' && c2 == '"':
		return quotedIdent(s, i, i+2)
	case IsIdentStart(c):
		return Token{Kind: Ident, Start: i, End: IdentEnd(s, i)}
	case isDigit(c) || c == '.' && isDigit(c1):
		return Token{Kind: Number, Start: i, End: NumberEnd(s, i)}
	case c == '$':
		if isDigit(c1) {
			e := i + 1
			for e < len(s) && isDigit(s[e]) {
				e++
			}
			return Token{Kind: Param, Start: i, End: junk(s, e)}
		}
		if d := DollarDelimEnd(s, i); d > 0 {
			end, closed := DollarEnd(s, i, d)
			return Token{Kind: String, Start: i, End: end, Open: !closed}
		}
	}
	return Token{Kind: Other, Start: i, End: i + 1}
}

// IdentEnd returns the end of the identifier starting at s[i].
func IdentEnd(s string, i int) int {
	i++
	for i < len(s) && IsIdentCont(s[i]) {
		i++
	}
	return i
}

// junk extends a number or parameter over an identifier glued to it
// (1abc, $1abc): Postgres rejects that as trailing junk, as one token.
func junk(s string, e int) int {
	if e < len(s) && IsIdentStart(s[e]) {
		return IdentEnd(s, e)
	}
	return e
}

// NumberEnd returns the end of the numeric literal starting at s[i] (a
// digit, or '.' before a digit): digits and '_', a fraction unless ".."
// follows (1..10), an exponent, then any identifier glued on (0x1F and
// 1abc alike end where that identifier ends).
func NumberEnd(s string, i int) int {
	e := i
	digits := func() {
		for e < len(s) && (isDigit(s[e]) || s[e] == '_') {
			e++
		}
	}
	digits()
	if e < len(s) && s[e] == '.' && !(e+1 < len(s) && s[e+1] == '.') {
		e++
		digits()
	}
	if e < len(s) && s[e]|0x20 == 'e' {
		f := e + 1
		if f < len(s) && (s[f] == '+' || s[f] == '-') {
			f++
		}
		if f < len(s) && isDigit(s[f]) {
			e = f
			digits()
		}
	}
	return junk(s, e)
}

// str scans a string literal whose opening quote is at s[q] (tok is the
// token start, before any prefix). ” is a quote; with backslash (E'…')
// a backslash escapes the next byte. A quote followed by whitespace that
// holds a newline and then another quote continues the literal, in the
// same mode (scan.l's {quotecontinue}).
func str(s string, tok, q int, backslash bool) Token {
	i := q + 1
	for i < len(s) {
		switch s[i] {
		case '\\':
			if backslash {
				i += 2
				continue
			}
		case '\'':
			if i+1 < len(s) && s[i+1] == '\'' {
				i += 2
				continue
			}
			if next, ok := continuation(s, i+1); ok {
				i = next + 1
				continue
			}
			return Token{Kind: String, Start: tok, End: i + 1}
		}
		i++
	}
	return Token{Kind: String, Start: tok, End: len(s), Open: true}
}

// continuation reports whether s[i:] is whitespace and "--" comments that
// hold at least one newline, followed by a quote (returned).
func continuation(s string, i int) (int, bool) {
	newline := false
	for i < len(s) {
		switch c := s[i]; {
		case c == '\n' || c == '\r':
			newline = true
			i++
		case IsSpace(c):
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			i = LineCommentEnd(s, i)
		case c == '\'':
			return i, newline
		default:
			return 0, false
		}
	}
	return 0, false
}

// quotedIdent scans "…" ("" is a quote) with its opening quote at s[q].
func quotedIdent(s string, tok, q int) Token {
	i := q + 1
	for i < len(s) {
		if s[i] == '"' {
			if i+1 < len(s) && s[i+1] == '"' {
				i += 2
				continue
			}
			return Token{Kind: QuotedIdent, Start: tok, End: i + 1}
		}
		i++
	}
	return Token{Kind: QuotedIdent, Start: tok, End: len(s), Open: true}
}

// DollarDelimEnd returns the end of the $tag$ delimiter at s[i] (s[i] is
// '$' at a token start), or 0 when none opens there. The tag is empty or
// an identifier without '$' that does not start with a digit.
func DollarDelimEnd(s string, i int) int {
	j := i + 1
	if j < len(s) && IsIdentStart(s[j]) {
		j++
		for j < len(s) && s[j] != '$' && IsIdentCont(s[j]) {
			j++
		}
	}
	if j < len(s) && s[j] == '$' {
		return j + 1
	}
	return 0
}

// DollarEnd returns the end of the dollar-quoted string at s[i] whose
// opening delimiter ends at d: after the first later occurrence of the
// same delimiter, or len(s) with closed false.
func DollarEnd(s string, i, d int) (end int, closed bool) {
	k := strings.Index(s[d:], s[i:d])
	if k < 0 {
		return len(s), false
	}
	return d + k + (d - i), true
}
