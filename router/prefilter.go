package router

import (
	"strings"

	"github.com/trellis-proxy/trellis-proxy/sqlscan"
)

// MayConcernTrellis is the byte-level prefilter of D5: false means the text
// is ordinary SQL and goes upstream without being parsed. It must never say
// false for a text the classifier would route away from pass-through, so it
// looks at the start of every statement (the start of the text and after
// every ';') for the Trellis leading keywords and for the head of a
// proxy-only call. It reads only those starts, never a whole long query.
//
// schema is the instance's catalog schema in lower case; "trellis" always
// names the catalog too through the proxy (the alias).
func MayConcernTrellis(sql, schema string) bool {
	if startsTrellisWord(sql) || startsCall(sql, schema) {
		return true
	}
	for i := strings.IndexByte(sql, ';'); i >= 0; {
		rest := sql[i+1:]
		if startsTrellisWord(rest) || startsCall(rest, schema) {
			return true
		}
		j := strings.IndexByte(rest, ';')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// startsCall reports whether a statement begins like a proxy-only call in a
// shape parseCall accepts: SELECT [ALL] [* FROM] <catalog>.<function>, with
// whitespace, comments and opening parentheses allowed between the words.
// A call anywhere else in a query is not ours: it reaches the catalog's stub,
// which refuses it (surface §11).
func startsCall(s, schema string) bool {
	i := skipCallNoise(s, 0)
	w := leadingWordAt(s, i)
	if !equalFold(w, "select") {
		return false
	}
	i = skipCallNoise(s, i+len(w))
	if w = leadingWordAt(s, i); equalFold(w, "all") {
		i = skipCallNoise(s, i+len(w))
	}
	if i < len(s) && s[i] == '*' {
		i = skipCallNoise(s, i+1)
		if w = leadingWordAt(s, i); !equalFold(w, "from") {
			return false
		}
		i = skipCallNoise(s, i+len(w))
	}
	if i+2 < len(s) && s[i]|0x20 == 'u' && s[i+1] == '&' && s[i+2] == '"' {
		return true // U&"…" may spell the catalog with escapes: let the parser decide
	}
	if i < len(s) && s[i] == '"' {
		// A quoted name is exact: "trellis" or the catalog schema.
		end := strings.IndexByte(s[i+1:], '"')
		if end < 0 {
			return false
		}
		name := s[i+1 : i+1+end]
		return name == "trellis" || (schema != "" && name == schema)
	}
	w = leadingWordAt(s, i)
	if len(w) > 63 {
		w = w[:63] // Postgres truncates a longer name to NAMEDATALEN-1 bytes
	}
	return equalFold(w, "trellis") || (schema != "" && equalFold(w, schema))
}

func skipCallNoise(s string, i int) int {
	for {
		i = skipSpaceAndComments(s, i)
		if i >= len(s) || s[i] != '(' {
			return i
		}
		i++
	}
}

// startsTrellisWord reports whether the first word after whitespace and
// comments is one a Trellis statement can begin with. It is deliberately
// looser than the grammar's recognizer (any ALTER or DROP counts), so it is a
// superset of it.
func startsTrellisWord(s string) bool {
	switch w := LeadingWord(s); len(w) {
	case 4:
		return equalFold(w, "drop")
	case 5:
		return equalFold(w, "pause") || equalFold(w, "alter")
	case 6:
		return equalFold(w, "resume")
	case 9:
		return equalFold(w, "transform")
	case 12:
		return equalFold(w, "relationship")
	}
	return false
}

// LeadingWord returns a statement's first word (as written) after
// whitespace and comments, "" when it starts with anything else.
func LeadingWord(s string) string { return leadingWordAt(s, skipSpaceAndComments(s, 0)) }

// leadingWordAt returns the identifier-like word starting at s[i].
func leadingWordAt(s string, i int) string {
	j := i
	for j < len(s) && isIdentByte(s[j]) {
		j++
	}
	return s[i:j]
}

// skipSpaceAndComments returns where the next token starts, with the
// shared scanner's rules (a "--" comment ends at '\n' or '\r', as in
// Postgres); inside an unterminated block comment there is none: len(s).
func skipSpaceAndComments(s string, i int) int {
	if e, ok := sqlscan.SkipSpace(s, i); ok {
		return e
	}
	return len(s)
}

// containsFold reports whether s contains word (lower-case ASCII) in any
// letter case. It looks for the second letter first with IndexByte in both
// cases, which the standard library does with vector instructions.
func containsFold(s, word string) bool {
	if len(word) < 2 {
		return strings.Contains(strings.ToLower(s), word)
	}
	for _, probe := range [2]byte{word[1], word[1] &^ 0x20} {
		for off := 0; ; {
			k := strings.IndexByte(s[off:], probe)
			if k < 0 {
				break
			}
			at := off + k - 1 // where the word would start
			if at >= 0 && at+len(word) <= len(s) && equalFold(s[at:at+len(word)], word) {
				return true
			}
			off += k + 1
		}
	}
	return false
}
