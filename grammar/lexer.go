package grammar

import (
	"strings"
	"unicode/utf8"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
	"github.com/trellis-proxy/trellis-proxy/sqlscan"
)

// The lexer follows Postgres's scan.l closely enough to find token
// boundaries, names and errors; the formulas' tokens are only inspected
// (missing AS, parameters, long names, nesting), their meaning comes from
// pg_query. Positions are byte offsets; posMap converts them to characters.

type tokKind uint8

const (
	tEOF    tokKind = iota
	tIdent          // unquoted word, val folded to lower case
	tQIdent         // "quoted", val decoded
	tUIdent         // U&"…", val is the raw body
	tString         // any string literal form
	tNumber
	tParam // $n
	tOp    // operator characters
	tLParen
	tRParen
	tLBrack
	tRBrack
	tComma
	tSemi
	tDot
	tColon
	tCast // ::
)

type token struct {
	kind       tokKind
	start, end int // byte offsets into the statement text
	val        string
}

// maxNameBytes is NAMEDATALEN-1: Postgres truncates longer names, we refuse
// them (grammar spec §2.3).
const maxNameBytes = 63

// posMap converts byte offsets to 1-based character positions.
type posMap struct {
	ascii bool
	idx   []int32 // idx[b] = characters before byte b; built only for non-ASCII text
}

func newPosMap(text string) *posMap {
	for i := 0; i < len(text); i++ {
		if text[i] >= utf8.RuneSelf {
			idx := make([]int32, len(text)+1)
			var n int32
			for b := 0; b < len(text); b++ {
				idx[b] = n
				// Count a character at every byte that is not a UTF-8
				// continuation byte (invalid text is refused before use).
				if b+1 >= len(text) || text[b+1]&0xC0 != 0x80 {
					n++
				}
			}
			idx[len(text)] = n
			return &posMap{idx: idx}
		}
	}
	return &posMap{ascii: true}
}

// at returns the 1-based character position of byte offset b.
func (m *posMap) at(b int) Pos {
	if b < 0 {
		return 0
	}
	if m.ascii {
		return Pos(b + 1)
	}
	if b >= len(m.idx) {
		b = len(m.idx) - 1
	}
	return Pos(m.idx[b] + 1)
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isIdentCont(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9' || c == '$'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isOpChar(c byte) bool { return strings.IndexByte("~!@#^&|`?+-*/%<>=", c) >= 0 }

// foldASCII lower-cases ASCII letters only, as Postgres does for unquoted
// names under UTF-8.
func foldASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

type lexer struct {
	text string
	p    int
	pm   *posMap
}

func (lx *lexer) errAt(variant string, b int, format string, args ...any) *pgerr.Error {
	return newErr(variant, lx.pm.at(b), format, args...)
}

// skip moves past whitespace and comments with the shared scanner's rules
// (-- to '\n' or '\r', nested /* */).
func (lx *lexer) skip() *pgerr.Error {
	e, ok := sqlscan.SkipSpace(lx.text, lx.p)
	if !ok {
		lx.p = len(lx.text)
		return lx.errAt(UnterminatedComment, e, "unterminated /* comment")
	}
	lx.p = e
	return nil
}

// next returns the next token.
func (lx *lexer) next() (token, *pgerr.Error) {
	if err := lx.skip(); err != nil {
		return token{kind: tEOF, start: len(lx.text), end: len(lx.text)}, err
	}
	t := lx.text
	s := lx.p
	if s >= len(t) {
		return token{kind: tEOF, start: s, end: s}, nil
	}
	c := t[s]
	var c1 byte
	if s+1 < len(t) {
		c1 = t[s+1]
	}
	tok := func(k tokKind, end int) (token, *pgerr.Error) {
		lx.p = end
		return token{kind: k, start: s, end: end}, nil
	}
	// Strings, names, numbers and parameters end where the shared scanner
	// says; the rest (operators, punctuation) is ours.
	switch st := sqlscan.Lex(t, s); st.Kind {
	case sqlscan.String:
		lx.p = st.End
		if st.Open {
			if c == '$' {
				return token{}, lx.errAt(UnterminatedString, s, "unterminated dollar-quoted string")
			}
			return token{}, lx.errAt(UnterminatedString, s, "unterminated quoted string")
		}
		return token{kind: tString, start: s, end: st.End}, nil
	case sqlscan.QuotedIdent:
		return lx.quotedIdent(st)
	case sqlscan.Ident:
		lx.p = st.End
		v := foldASCII(t[s:st.End])
		if len(v) > maxNameBytes {
			return token{}, lx.errAt(NameTooLong, s, "identifier %q is %d bytes long; names are limited to %d bytes", v, len(v), maxNameBytes)
		}
		return token{kind: tIdent, start: s, end: st.End, val: v}, nil
	case sqlscan.Number:
		return tok(tNumber, st.End)
	case sqlscan.Param:
		return tok(tParam, st.End)
	}
	switch {
	case c == '$':
		return token{}, lx.errAt(UnexpectedChar, s, "unexpected character \"$\"")
	case c == '.':
		return tok(tDot, s+1)
	case c == ':':
		if c1 == ':' {
			return tok(tCast, s+2)
		}
		if c1 == '=' {
			return tok(tOp, s+2)
		}
		return tok(tColon, s+1)
	case c == '(':
		return tok(tLParen, s+1)
	case c == ')':
		return tok(tRParen, s+1)
	case c == '[':
		return tok(tLBrack, s+1)
	case c == ']':
		return tok(tRBrack, s+1)
	case c == ',':
		return tok(tComma, s+1)
	case c == ';':
		return tok(tSemi, s+1)
	case isOpChar(c):
		e := s
		for e < len(t) && isOpChar(t[e]) {
			// A comment start ends the operator, as in scan.l.
			if e > s && e+1 < len(t) && (t[e] == '-' && t[e+1] == '-' || t[e] == '/' && t[e+1] == '*') {
				break
			}
			e++
		}
		return tok(tOp, e)
	}
	r, _ := utf8.DecodeRuneInString(t[s:])
	return token{}, lx.errAt(UnexpectedChar, s, "unexpected character %q", r)
}

// quotedIdent decodes the "…" or U&"…" token st ("" is a quote).
func (lx *lexer) quotedIdent(st sqlscan.Token) (token, *pgerr.Error) {
	t := lx.text
	lx.p = st.End
	if st.Open {
		return token{}, lx.errAt(UnterminatedString, st.Start, "unterminated quoted identifier")
	}
	kind, q := tQIdent, st.Start
	if t[q] != '"' {
		kind, q = tUIdent, q+2
	}
	v := strings.ReplaceAll(t[q+1:st.End-1], `""`, `"`)
	if v == "" {
		return token{}, lx.errAt(ZeroLengthIdentifier, st.Start, "zero-length delimited identifier")
	}
	if len(v) > maxNameBytes {
		return token{}, lx.errAt(NameTooLong, st.Start, "identifier %q is %d bytes long; names are limited to %d bytes", v, len(v), maxNameBytes)
	}
	return token{kind: kind, start: st.Start, end: st.End, val: v}, nil
}

// leadingTrellis decides from the first tokens whether text is a Trellis
// statement (grammar spec §2.1), with the real lexer. Recognize is the fast
// byte-level twin; the fuzz test keeps them in agreement.
func leadingTrellis(text string) bool {
	lx := &lexer{text: text, pm: &posMap{ascii: true}}
	t1, err := lx.next()
	if err != nil || t1.kind != tIdent {
		return false
	}
	switch t1.val {
	case "transform", "relationship", "pause", "resume":
		return true
	case "alter", "drop":
	default:
		return false
	}
	t2, err := lx.next()
	if err != nil || t2.kind != tIdent {
		return false
	}
	if t1.val == "alter" {
		return t2.val == "transform"
	}
	if t2.val == "relationship" {
		return true
	}
	if t2.val != "transform" {
		return false
	}
	t3, err := lx.next()
	if err != nil {
		return true // not the word IF or FOR, whatever it is
	}
	return !(t3.kind == tIdent && (t3.val == "if" || t3.val == "for"))
}

// BackslashInPlainString reports the position of the first plain '…' string
// literal holding a backslash. The router refuses such a statement with
// UnsupportedSessionSetting when the session has standard_conforming_strings
// off (grammar spec §2.2): the proxy and the server would read it
// differently. Lexing errors end the scan (Parse reports them).
func BackslashInPlainString(text string) (Pos, bool) {
	lx := &lexer{text: text, pm: newPosMap(text)}
	for {
		t, err := lx.next()
		if err != nil || t.kind == tEOF {
			return 0, false
		}
		if t.kind == tString && text[t.start] == '\'' && strings.IndexByte(text[t.start:t.end], '\\') >= 0 {
			return lx.pm.at(t.start), true
		}
	}
}
