package router

import "unicode/utf8"

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
	i := 0
	for i < len(sql) {
		c := sql[i]
		switch {
		case c == '\'':
			// E'..' strings treat backslash as an escape; the E is the
			// previous byte when it stands alone as a prefix.
			escapes := i > 0 && (sql[i-1] == 'e' || sql[i-1] == 'E') && (i == 1 || !isIdentByte(sql[i-2]))
			i = skipQuoted(sql, i+1, '\'', escapes)
			prevWord = ""
		case c == '"':
			i = skipQuoted(sql, i+1, '"', false)
			prevWord = ""
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = skipBlockComment(sql, i)
		case c == '$':
			if end, ok := skipDollar(sql, i); ok {
				i = end
				prevWord = ""
			} else {
				i++
			}
		case c == ';':
			if atomicDepth == 0 {
				emit(i)
				start = i + 1
			}
			i++
			prevWord = ""
		case isIdentStart(c):
			j := i
			for j < len(sql) && isIdentByte(sql[j]) {
				j++
			}
			word := sql[i:j]
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
			i = j
		default:
			if c > ' ' {
				prevWord = ""
			}
			i++
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

func skipQuoted(s string, i int, quote byte, backslashEscapes bool) int {
	for i < len(s) {
		switch s[i] {
		case '\\':
			if backslashEscapes {
				i += 2
				continue
			}
		case quote:
			if i+1 < len(s) && s[i+1] == quote {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return i
}

func skipBlockComment(s string, i int) int {
	depth := 0
	for i < len(s) {
		if s[i] == '/' && i+1 < len(s) && s[i+1] == '*' {
			depth++
			i += 2
			continue
		}
		if s[i] == '*' && i+1 < len(s) && s[i+1] == '/' {
			depth--
			i += 2
			if depth == 0 {
				return i
			}
			continue
		}
		i++
	}
	return i
}

// skipDollar skips a $tag$ ... $tag$ string starting at s[i] == '$'. A '$'
// that does not open a dollar quote ($1 parameters, identifiers with $) is
// not one.
func skipDollar(s string, i int) (int, bool) {
	if i > 0 && isIdentByte(s[i-1]) {
		return 0, false // part of an identifier such as a$b
	}
	j := i + 1
	for j < len(s) && s[j] != '$' {
		if !isIdentByte(s[j]) || (j == i+1 && s[j] >= '0' && s[j] <= '9') {
			return 0, false
		}
		j++
	}
	if j >= len(s) {
		return 0, false
	}
	tag := s[i : j+1]
	for k := j + 1; k+len(tag) <= len(s); k++ {
		if s[k] == '$' && s[k:k+len(tag)] == tag {
			return k + len(tag), true
		}
	}
	return len(s), true
}

func isIdentStart(c byte) bool {
	return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') || c >= 0x80
}

func isIdentByte(c byte) bool {
	return isIdentStart(c) || (c >= '0' && c <= '9') || c == '$'
}

// blank reports whether s holds only whitespace and comments.
func blank(s string) bool { return skipSpaceAndComments(s, 0) == len(s) }

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
