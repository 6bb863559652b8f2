package wire

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

func TestBatchBeginsBlock(t *testing.T) {
	for sql, want := range map[string]bool{
		"BEGIN": true, "  begin isolation level serializable": true, "/* a */ -- b\nSTART TRANSACTION": true,
		"COMMIT AND CHAIN": true, "rollback and chain": true, "COMMIT AND NO CHAIN": false, "COMMIT": false,
		"END": false, "SELECT 'begin'": false, "BEGINX": false, "(begin)": false, "": false, "/* unterminated": false,
	} {
		if got := beginsBlock([]byte(sql)); got != want {
			t.Errorf("beginsBlock(%q) = %v", sql, got)
		}
	}
}

func TestBatchMatchProbe(t *testing.T) {
	cc := func(tag string) replyFrame { return replyFrame{msgCommandComplete, append([]byte(tag), 0)} }
	f := func(typ byte) replyFrame { return replyFrame{typ, nil} }
	warn, _ := (&pgproto3.NoticeResponse{Severity: "WARNING", Code: "25001", Message: "already"}).Encode(nil)
	other, _ := (&pgproto3.NoticeResponse{Severity: "NOTICE", Code: "00000", Message: "x"}).Encode(nil)
	n := func(b []byte) replyFrame { return replyFrame{msgNoticeResponse, b[5:]} }
	probe := func(changed bool, notice []byte) []replyFrame {
		out := []replyFrame{f('3'), f('3'), f('1'), f('2')}
		tag := "SELECT 0"
		if changed {
			out = append(out, f('D'))
			tag = "SELECT 1"
		}
		out = append(out, cc(tag), f('3'), f('3'), f('3'), f('3'), f('1'), f('2'))
		if notice != nil {
			out = append(out, n(notice))
		}
		return append(out, cc("BEGIN"), f('3'), f('3'))
	}
	client := []replyFrame{f('1'), f('2'), f('D'), cc("SELECT 1")}
	for _, c := range []struct {
		name                string
		tail                []replyFrame
		ok, warned, changed bool
		start               int
	}{
		{"opened", append(append([]replyFrame{}, client...), probe(false, nil)...), true, false, false, 4},
		{"in a block", append(append([]replyFrame{}, client...), probe(false, warn)...), true, true, false, 4},
		{"quiet session", probe(true, warn), true, true, true, 0},
		{"with a ParameterStatus", append(probe(false, nil), replyFrame{msgParameterStatus, nil}), true, false, false, 0},
		{"skipped after an error", append(append([]replyFrame{}, client...), f('E')), false, false, false, 0},
		{"another notice", probe(false, other), false, false, false, 0},
		{"too short", probe(false, nil)[3:], false, false, false, 0},
	} {
		start, ok, warned, changed := matchProbe(c.tail)
		if ok != c.ok || ok && (warned != c.warned || changed != c.changed || start != c.start) {
			t.Errorf("%s: start %d ok %v warned %v changed %v", c.name, start, ok, warned, changed)
		}
	}
}
