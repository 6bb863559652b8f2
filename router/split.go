package router

import (
	"unicode/utf8"

	"github.com/trellis-proxy/trellis-proxy/sqlscan"
)

// Piece is one statement of a client's query string.
type Piece struct {
	Text       string // the statement, without its terminating ';'
	Offset     int    // byte offset of Text in the whole string
	CharOffset int    // character offset of Text in the whole string (positions are in characters)
}

// Split cuts a simple-query string into statements at ';' outside string
// literals, quoted identifiers, dollar quotes, comments and BEGIN ATOMIC
// bodies, the way Postgres's own scanner delimits them. Empty statements
// (only whitespace and comments) are dropped, as Postgres drops them.
//
// It never fails: an unterminated quote or comment simply runs to the end of
// the string, and the parser of whichever side receives that piece reports
// the error.
func Split(sql string) []Piece {
	var pieces []Piece
	start := 0
	atomicDepth := 0 // inside BEGIN ATOMIC ... END of a SQL-standard function body
	caseDepth := 0   // CASE ... END nesting inside such a body
	prevWord := ""
	emit := func(end int) {
		text := sql[start:end]
		if !blank(text) {
			pieces = append(pieces, Piece{Text: text, Offset: start})
		}
	}
	for i := 0; i < len(sql); {
		p, ok := sqlscan.SkipSpace(sql, i)
		if !ok || p >= len(sql) {
			break // an unterminated comment runs to the end
		}
		tk := sqlscan.Lex(sql, p)
		i = tk.End
		switch {
		case tk.Kind == sqlscan.Other && sql[p] == ';':
			if atomicDepth == 0 {
				emit(p)
				start = p + 1
			}
			prevWord = ""
		case tk.Kind == sqlscan.Ident:
			word := sql[p:tk.End]
			switch {
			case equalFold(word, "atomic") && equalFold(prevWord, "begin"):
				atomicDepth++
			case atomicDepth > 0 && equalFold(word, "case"):
				caseDepth++
			case atomicDepth > 0 && equalFold(word, "end"):
				if caseDepth > 0 {
					caseDepth--
				} else {
					atomicDepth--
				}
			}
			prevWord = word
		default:
			prevWord = ""
		}
	}
	emit(len(sql))
	// Character offsets, computed once for all pieces.
	chars, at := 0, 0
	for k := range pieces {
		chars += utf8.RuneCountInString(sql[at:pieces[k].Offset])
		at = pieces[k].Offset
		pieces[k].CharOffset = chars
	}
	return pieces
}

func isIdentByte(c byte) bool { return sqlscan.IsIdentCont(c) }

// blank reports whether s holds only whitespace and (terminated) comments.
func blank(s string) bool {
	e, ok := sqlscan.SkipSpace(s, 0)
	return ok && e == len(s)
}

// equalFold compares an identifier with a lower-case ASCII word.
func equalFold(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c |= 0x20
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
