package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Mixed Sync batches (D6): a batch whose local messages (Trellis statements,
// proxy-answered calls) share a Sync with ordinary ones. Ordinary messages
// go upstream as read; a group of local messages runs at its place, when the
// next ordinary message, Flush or Sync shows the group is whole. Before it
// runs, the upstream part of the batch since the last group is settled: its
// replies are relayed and the upstream batch is closed with a Sync of the
// proxy's, after making sure that Sync commits nothing (docs/architecture.md,
// "Mixed Sync batches").

// batchStep tells a unit where in a mixed batch it runs and carries what the
// unit learnt back to the client→server pump (read after the unit is done).
type batchStep struct {
	// settle: ordinary messages went upstream since the last Sync; read their
	// replies and close the upstream batch before anything else.
	settle bool
	// executed: one of them was an Execute, so the batch may hold an
	// implicit transaction that a bare Sync would commit.
	executed bool
	// began: an ordinary BEGIN-like statement went upstream since the last
	// settle, so an open block may be the client's now.
	began bool
	// promote: the group is followed by more of the batch; in autocommit
	// it runs in a block the proxy opens, so the rest shares its
	// transaction as Postgres's implicit one would.
	promote bool
	// finish: the client's Sync (or a simple Query) ends the batch: the
	// proxy's block is committed, or rolled back after an error.
	finish bool
	z      bool // write ReadyForQuery after finishing (the client's Sync)
	err    *pgerr.Error

	owns   bool // in/out: the block open upstream was opened by the proxy
	failed bool // in/out: the batch failed; everything up to Sync is skipped
}

// probeCMM makes the warning of the probe's BEGIN visible whatever the
// session's client_min_messages (only "error" hides warnings); it returns a
// row when it changed the setting, which is then put back.
const probeCMM = "SELECT set_config('client_min_messages', 'warning', true) WHERE current_setting('client_min_messages') = 'error'"

// appendLentExec appends one statement on the lent names, closed after use
// (and before, in case an earlier failure left them).
func appendLentExec(b []byte, sql string) []byte {
	b, _ = (&pgproto3.Close{ObjectType: objPortal, Name: lentPortal}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: objStatement, Name: lentStmt}).Encode(b)
	b, _ = (&pgproto3.Parse{Name: lentStmt, Query: sql}).Encode(b)
	b, _ = (&pgproto3.Bind{DestinationPortal: lentPortal, PreparedStatement: lentStmt}).Encode(b)
	b, _ = (&pgproto3.Execute{Portal: lentPortal}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: objPortal, Name: lentPortal}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: objStatement, Name: lentStmt}).Encode(b)
	return b
}

// runStep runs a unit of a mixed batch.
func (s *session) runStep(ctx context.Context, u *localUnit, up *lentUpstream, w *resultWriter) {
	st := u.step
	if st.settle {
		s.settle(ctx, st, up, w)
		if up.broken != nil || w.err != nil {
			return
		}
	}
	if !st.failed && st.err != nil {
		w.Error(st.err)
		st.failed = true
		s.abortClientBlock(ctx, st, up)
	}
	if !st.failed && len(u.msgs) > 0 {
		if st.promote && s.info.TxStatus() == 'I' && hasExecute(u.msgs) {
			if _, err := up.Exec(ctx, "BEGIN"); err != nil {
				if up.broken != nil {
					return
				}
				w.Error(asPgErr(err))
				st.failed = true
			} else {
				st.owns = true
			}
		}
		if !st.failed && !s.runExtended(ctx, u.msgs, up, w) {
			st.failed = true
			s.abortClientBlock(ctx, st, up)
		}
		if up.broken != nil || w.err != nil {
			return
		}
	}
	if st.finish {
		if st.owns {
			// Postgres ends the implicit transaction at Sync: commit it, or
			// roll it back after an error.
			st.owns = false
			end := "COMMIT"
			if st.failed || s.info.TxStatus() == 'E' {
				end = "ROLLBACK"
			}
			if _, err := up.Exec(context.WithoutCancel(ctx), end); err != nil {
				if up.broken != nil {
					return
				}
				w.Error(asPgErr(err)) // a deferred constraint failing at commit
			}
		}
		if st.z {
			w.frame(msgReadyForQuery, []byte{s.info.TxStatus()})
		}
	}
}

// abortClientBlock fails the client's own open block after a local error
// that did not already (a Describe's, say), so the backend agrees with the
// client that the block is aborted, as Postgres would have it. A block the
// proxy opened is rolled back at Sync instead.
func (s *session) abortClientBlock(ctx context.Context, st *batchStep, up *lentUpstream) {
	if st.owns || s.info.TxStatus() != 'T' {
		return
	}
	up.Exec(context.WithoutCancel(ctx), "SELECT "+abortBlockToken) // fails by design: undefined column
}

// abortBlockToken names nothing, so selecting it fails the block (42703).
const abortBlockToken = "trellis_proxy_aborts_the_block"

func hasExecute(msgs []localMsg) bool {
	for _, m := range msgs {
		if m.typ == msgExecute {
			return true
		}
	}
	return false
}

// replyFrame is a reply frame the settle holds back until it knows whose it is.
type replyFrame struct {
	typ  byte
	body []byte
}

// ourReplies is the most frames the probe answers with (see matchProbe).
const ourReplies = 16

// settle relays the replies of the ordinary messages forwarded since the
// last Sync and closes the upstream batch with a Sync of the proxy's.
//
// A Sync commits the implicit transaction of a batch outside a block, which
// must not happen before the rest of the client's batch ran. When an Execute
// was among the forwarded messages, the proxy therefore sends BEGIN before
// its Sync: Postgres then turns the implicit transaction, prefix included,
// into a block ("statements executed as an implicit transaction block are
// retroactively included", protocol docs), and the proxy ends it at the
// client's Sync. BEGIN inside a block only warns (25001); that warning,
// forced visible for the moment by probeCMM, tells whether the block was
// already open (the client's, or the proxy's from an earlier group). Without
// an Execute nothing ran that a Sync could commit, so a bare Sync does.
//
// The probe's replies come last before its ReadyForQuery, so they are
// recognised from the end: frames are relayed with a delay of ourReplies
// frames. If anything failed earlier in the batch, Postgres skipped the
// probe and rolled back at its Sync, as it would at the client's: the batch
// has failed and its rest is skipped.
func (s *session) settle(ctx context.Context, st *batchStep, up *lentUpstream, w *resultWriter) {
	st.settle = false
	b := up.buf[:0]
	if st.executed {
		b = appendLentExec(b, probeCMM)
		b = appendLentExec(b, "BEGIN")
	}
	b, _ = (&pgproto3.Sync{}).Encode(b)
	up.buf = b
	if _, err := s.uw.Write(b); err != nil {
		up.broken = err
		return
	}
	if err := s.uw.Flush(); err != nil {
		up.broken = err
		return
	}
	stop := context.AfterFunc(ctx, s.cancelUpstream)
	defer stop()

	failed := s.batchErr
	var tail []replyFrame
	nonAsync := 0
	relayOldest := func() {
		f := tail[0]
		tail = tail[1:]
		if f.typ != msgParameterStatus && f.typ != msgNotification {
			nonAsync--
		}
		w.frame(f.typ, f.body)
	}
	for {
		typ, n, err := peekHeader(s.ur, s.srv.cfg.MaxServerMessageSize)
		if err != nil {
			if isTimeout(err) {
				s.clearWake()
				continue
			}
			up.broken = err
			return
		}
		if n > batchCap {
			// Not the probe's: stream it after what is held.
			for len(tail) > 0 {
				relayOldest()
			}
			var hdr [5]byte
			hdr[0] = typ
			binary.BigEndian.PutUint32(hdr[1:], uint32(n+4))
			if _, err := s.cw.Write(hdr[:]); err != nil {
				w.err = err
				return
			}
			if err := s.copyUpstreamBody(n); err != nil {
				if err == errClientWrite {
					w.err = err
				} else {
					up.broken = err
				}
				return
			}
			continue
		}
		body, err := s.readUpstreamBody(n)
		if err != nil {
			up.broken = err
			return
		}
		switch typ {
		case msgReadyForQuery:
			if len(body) == 1 {
				s.info.setTxStatus(body[0])
			}
			s.batchErr = false
			if st.executed && !failed {
				start, ok, warned, changed := matchProbe(tail)
				if ok {
					for i, f := range tail {
						if i < start || f.typ == msgParameterStatus || f.typ == msgNotification {
							w.frame(f.typ, f.body)
						}
					}
					switch {
					case !warned:
						st.owns = true // the proxy's BEGIN opened the block
					case st.began:
						st.owns = false // the client's BEGIN did
					}
					if changed {
						up.Exec(ctx, "SELECT set_config('client_min_messages', 'error', true)")
					}
					return
				}
				failed = true
			}
			for len(tail) > 0 {
				relayOldest()
			}
			if failed {
				// Postgres ended the batch at the proxy's Sync: a block of
				// the proxy's is left aborted unless a BEGIN of the
				// client's took it over (or it was rolled back).
				st.failed = true
				st.owns = st.owns && !st.began && s.info.TxStatus() == 'E'
			}
			return
		case msgErrorResponse:
			failed = true
			var er pgproto3.ErrorResponse
			if er.Decode(body) == nil {
				s.srv.metrics.ErrorSent("upstream", er.Code)
			}
		case msgParameterStatus:
			s.noteParameterStatus(body)
		}
		tail = append(tail, replyFrame{typ, bytes.Clone(body)})
		if typ != msgParameterStatus && typ != msgNotification {
			nonAsync++
		}
		for nonAsync > ourReplies || (!st.executed && len(tail) > 0) {
			relayOldest()
		}
		if w.err != nil {
			return
		}
	}
}

// matchProbe finds the probe's replies at the end of tail (two
// appendLentExec):
//
//	3 3 1 2 [D] C"SELECT n" 3 3   (probeCMM)
//	3 3 1 2 [N 25001] C"BEGIN" 3 3
//
// ParameterStatus and notification frames in between are not the probe's.
func matchProbe(tail []replyFrame) (start int, ok, warned, changed bool) {
	j := len(tail) - 1
	next := func() (replyFrame, bool) {
		for j >= 0 && (tail[j].typ == msgParameterStatus || tail[j].typ == msgNotification) {
			j--
		}
		if j < 0 {
			return replyFrame{}, false
		}
		f := tail[j]
		start = j
		j--
		return f, true
	}
	want := func(typ byte) bool {
		f, ok := next()
		return ok && f.typ == typ
	}
	tag := func() string {
		f, ok := next()
		if !ok || f.typ != msgCommandComplete {
			return ""
		}
		return string(bytes.TrimRight(f.body, "\x00"))
	}
	if !want(msgCloseComplete) || !want(msgCloseComplete) || tag() != "BEGIN" {
		return 0, false, false, false
	}
	f, fok := next()
	if fok && f.typ == msgNoticeResponse {
		var nr pgproto3.NoticeResponse
		if nr.Decode(f.body) != nil || nr.Code != "25001" {
			return 0, false, false, false
		}
		warned = true
		f, fok = next()
	}
	if !fok || f.typ != msgBindComplete || !want(msgParseComplete) || !want(msgCloseComplete) || !want(msgCloseComplete) || !want(msgCloseComplete) || !want(msgCloseComplete) {
		return 0, false, false, false
	}
	switch tag() {
	case "SELECT 0":
	case "SELECT 1":
		changed = true
		if !want(msgDataRow) {
			return 0, false, false, false
		}
	default:
		return 0, false, false, false
	}
	if !want(msgBindComplete) || !want(msgParseComplete) || !want(msgCloseComplete) || !want(msgCloseComplete) {
		return 0, false, false, false
	}
	return start, true, warned, changed
}

// beginsBlock says whether an ordinary statement may open a transaction
// block: BEGIN, START TRANSACTION, or COMMIT/ROLLBACK AND CHAIN.
func beginsBlock(sql []byte) bool {
	w := strings.ToLower(leadingWord(sql))
	switch w {
	case "begin", "start":
		return true
	case "commit", "end", "rollback", "abort":
		l := strings.ToLower(string(sql))
		return strings.Contains(l, "chain") && !strings.Contains(l, "no chain")
	}
	return false
}

// leadingWord is the first keyword of sql after blanks and comments.
func leadingWord(sql []byte) string {
	i := 0
	for i < len(sql) {
		switch c := sql[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' && sql[i] != '\r' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			depth := 0
			for i+1 < len(sql) {
				if sql[i] == '/' && sql[i+1] == '*' {
					depth++
					i += 2
				} else if sql[i] == '*' && sql[i+1] == '/' {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
			if depth > 0 {
				return ""
			}
		default:
			j := i
			for j < len(sql) && (sql[j] >= 'a' && sql[j] <= 'z' || sql[j] >= 'A' && sql[j] <= 'Z' || sql[j] == '_') {
				j++
			}
			return string(sql[i:j])
		}
	}
	return ""
}

type localStmt struct {
	name      string
	sql       string
	route     Route
	paramOIDs []uint32
}

type localPortal struct {
	stmt          *localStmt
	paramFormats  []int16
	params        [][]byte
	resultFormats []int16
}

type localMsg struct {
	typ     byte // msgParse, msgBind, msgDescribe, msgExecute, msgClose, msgSync, msgFlush
	stmt    *localStmt
	portal  *localPortal
	objType byte // Describe/Close target
	maxRows uint32
	// rewritten is the whole frame to send upstream instead of a Parse
	// the interceptor rewrote (Route.Rewrite); the statement stays
	// upstream's.
	rewritten []byte
}

// c2sBatch is the extended-protocol batch being read (interception on).
type c2sBatch struct {
	local     []localMsg // local messages not yet answered: a group
	forwarded bool       // ordinary messages went upstream since the last Sync (the client's or the proxy's)
	executed  bool       // ... and an Execute among them
	began     bool       // ... and a BEGIN-like statement, after a group ran
	ranLocal  bool       // a group of this batch ran: the batch is mixed, its Sync is the proxy's to answer
	owns      bool       // the proxy opened the block open upstream (batch.go)
	failed    bool       // the batch failed: skip to Sync, as Postgres does
}

func (b *c2sBatch) reset() { *b = c2sBatch{} }

// runGroup runs the pending group of a mixed batch (possibly empty) at its
// place: upstream's part before it settled first. finish ends the batch (z:
// at the client's Sync); promote says more of the batch follows. False means
// the session ended.
func (s *session) runGroup(b *c2sBatch, promote, finish, z bool, e *pgerr.Error) bool {
	st := &batchStep{settle: b.forwarded, executed: b.executed, began: b.began, promote: promote,
		finish: finish, z: z, err: e, owns: b.owns, failed: b.failed}
	msgs := b.local
	b.local = nil
	if !s.runLocal(&localUnit{msgs: msgs, step: st}) {
		return false
	}
	b.forwarded, b.executed, b.began = false, false, false
	b.ranLocal, b.owns, b.failed = true, st.owns, st.failed
	return true
}

// classifyExtended decides the owner of one extended-protocol message and
// keeps the statement and portal ownership maps.
func (s *session) classifyExtended(typ byte, body []byte, stmts map[string]*localStmt, portals map[string]*localPortal) (localMsg, bool, *pgerr.Error) {
	bad := func() (localMsg, bool, *pgerr.Error) {
		return localMsg{}, false, fatal(pgerr.ProtocolViolation, "invalid message format for message type %s", quoteTyp(typ))
	}
	switch typ {
	case msgParse:
		// Pass-through statements are the common case: check the frame the
		// way pgproto3 would and look names up without decoding it whole
		// (no allocation but the SQL string Classify takes).
		name, query, ok := scanParse(body)
		if !ok {
			return bad()
		}
		route := s.intercept.Classify(s.info, string(query))
		if !route.Local || route.Rewrite != "" {
			if len(stmts) > 0 {
				delete(stmts, string(name))
			}
			if route.Rewrite == "" {
				return localMsg{}, false, nil
			}
			var p pgproto3.Parse
			if p.Decode(body) != nil {
				return bad()
			}
			p.Query = route.Rewrite
			f, err := p.Encode(nil)
			if err != nil {
				return bad()
			}
			return localMsg{typ: msgParse, rewritten: f}, false, nil
		}
		var p pgproto3.Parse
		if p.Decode(body) != nil {
			return bad()
		}
		st := &localStmt{name: p.Name, sql: p.Query, route: route, paramOIDs: append([]uint32(nil), p.ParameterOIDs...)}
		stmts[p.Name] = st
		return localMsg{typ: msgParse, stmt: st}, true, nil
	case msgBind:
		portal, stmt, ok := scanBind(body)
		if !ok {
			return bad()
		}
		if stmts[string(stmt)] == nil {
			if len(portals) > 0 {
				delete(portals, string(portal))
			}
			return localMsg{}, false, nil
		}
		var b pgproto3.Bind
		if b.Decode(body) != nil {
			return bad()
		}
		st := stmts[b.PreparedStatement]
		params := make([][]byte, len(b.Parameters))
		for i, p := range b.Parameters {
			if p != nil {
				params[i] = append([]byte{}, p...)
			}
		}
		po := &localPortal{stmt: st, paramFormats: append([]int16(nil), b.ParameterFormatCodes...), params: params,
			resultFormats: append([]int16(nil), b.ResultFormatCodes...)}
		portals[b.DestinationPortal] = po
		return localMsg{typ: msgBind, portal: po}, true, nil
	case msgDescribe, msgClose:
		if len(body) < 2 {
			return bad()
		}
		name, _, ok := scanCString(body[1:])
		if !ok {
			return bad()
		}
		switch body[0] {
		case objStatement:
			st := stmts[string(name)]
			if typ == msgClose && st != nil {
				delete(stmts, string(name))
			}
			return localMsg{typ: typ, objType: objStatement, stmt: st}, st != nil, nil
		case objPortal:
			po := portals[string(name)]
			if typ == msgClose && po != nil {
				delete(portals, string(name))
			}
			return localMsg{typ: typ, objType: objPortal, portal: po}, po != nil, nil
		}
		return bad()
	case msgExecute:
		portal, rest, ok := scanCString(body)
		if !ok || len(rest) < 4 {
			return bad()
		}
		po := portals[string(portal)]
		return localMsg{typ: msgExecute, portal: po, maxRows: binary.BigEndian.Uint32(rest)}, po != nil, nil
	}
	return localMsg{}, false, nil
}
