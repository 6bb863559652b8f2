package wire

import (
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// planEntry is one element of the reply plan, in client order.
type planEntry struct {
	owed int        // ReadyForQuery frames upstream still owes (upstream entry)
	unit *localUnit // a local unit instead of upstream replies
}

// localUnit is a piece of the client's stream answered by the proxy.
type localUnit struct {
	call  *Call        // a simple Query answered locally
	msgs  []localMsg   // an extended-protocol batch answered locally
	err   *pgerr.Error // answer with this error (then ReadyForQuery when z)
	z     bool
	step  *batchStep   // msgs is a group of a mixed Sync batch (batch.go)
	fatal *pgerr.Error // protocol violation: write it and end the session
	done  chan struct{}
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
	typ     byte // 'P', 'B', 'D', 'E', 'C', 'S', 'H'
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

// clientToServer is the client→server pump: the only writer of the upstream
// socket (except while a unit it handed over borrows it).
func (s *session) clientToServer() {
	max := s.srv.cfg.MaxMessageSize
	var (
		hdr            [5]byte
		body           []byte
		syncsSinceExec int
		copySeen       bool
		batch          c2sBatch
		slowUntilEnd   bool // the routed scan found no whole batch: go frame by frame to the batch's end
		stmts          = map[string]*localStmt{}
		portals        = map[string]*localPortal{}
	)
	gone := func() {
		// Client left without Terminate: end the backend politely.
		s.clientGone.Store(true)
		s.uw.Write([]byte{'X', 0, 0, 0, 4})
		s.uw.Flush()
		s.closeUpstream()
	}
	for {
		if s.cr.Buffered() < 5 {
			if s.c2sRun == 0 && s.cr.Buffered() == 0 && s.cr != s.crSmall {
				// The stream is over: give the big buffers back.
				if shrinkWriter(&s.uw, s.uwSmall) != nil {
					s.closeClientSide()
					return
				}
				shrinkReader(&s.cr, s.crSmall)
			}
			if err := s.uw.Flush(); err != nil {
				s.closeClientSide()
				return
			}
		}
		if s.cr.Buffered() >= 5 && (s.intercept == nil || copySeen) {
			// Relay a run of whole raw frames straight from the read buffer
			// in one write, with the bookkeeping the loop below does per
			// frame. Frames that need more (a Sync-debt correction at the
			// start of a copy, Terminate, anything the interceptor sees, a
			// partial or bad frame) end the run.
			b, _ := s.cr.Peek(s.cr.Buffered())
			k, msgs, debt, lastEnd, syncs, cs := 0, 0, 0, 0, syncsSinceExec, copySeen
		scan:
			for len(b)-k >= 5 {
				typ := b[k]
				l := int64(binary.BigEndian.Uint32(b[k+1:]))
				if l < 4 || l-4 > int64(max) || int64(len(b)-k-1) < l {
					break
				}
				if s.intercept != nil && typ != 'd' {
					break
				}
				switch typ {
				case 'd', 'c', 'f':
					if !cs {
						break scan
					}
				case 'X':
					break scan
				case 'Q', 'F':
					syncs, cs = 0, false
					debt++
				case 'E':
					syncs, cs = 0, false
				case 'S':
					syncs++
					debt++
				}
				k += 1 + int(l)
				msgs++
				switch typ {
				case 'Q', 'S', 'F', 'c', 'f':
					lastEnd = k
				}
			}
			if k > 0 {
				syncsSinceExec, copySeen = syncs, cs
				if debt > 0 && !s.addDebt(debt) {
					return
				}
				if lastEnd > 0 {
					s.c2sRun = 0
				}
				s.c2sRun += k - lastEnd
				s.relayed.c2sMsgs.Add(uint64(msgs))
				s.relayed.c2sBytes.Add(uint64(k))
				if _, err := s.uw.Write(b[:k]); err != nil {
					gone()
					return
				}
				s.cr.Discard(k)
				continue
			}
		}
		if s.intercept != nil && !copySeen && !slowUntilEnd && batch.local == nil && !batch.ranLocal {
			// Routed, but only whole batches of ordinary statements: relay
			// them raw, as the relay without routing would. Wait for the
			// client's next write first, so its batch is scanned whole
			// (an error is left for peekHeader below to report).
			if s.cr.Buffered() < 5 {
				s.cr.Peek(5)
			}
		}
		if s.cr.Buffered() >= 5 && s.intercept != nil && !copySeen && !slowUntilEnd && batch.local == nil && !batch.ranLocal {
			b, _ := s.cr.Peek(s.cr.Buffered())
			if r := s.scanRouted(b, max, syncsSinceExec, batch.forwarded, stmts, portals); r.k > 0 {
				if r.debt > 0 && !s.addDebt(r.debt) {
					return
				}
				syncsSinceExec = r.syncs
				if r.flushed {
					batch.forwarded = true
					batch.executed = batch.executed || r.executed
				} else {
					batch.reset()
				}
				if r.lastEnd > 0 {
					s.c2sRun = 0
				}
				s.c2sRun += r.k - r.lastEnd
				s.relayed.c2sMsgs.Add(uint64(r.msgs))
				s.relayed.c2sBytes.Add(uint64(r.k))
				if _, err := s.uw.Write(b[:r.k]); err != nil {
					gone()
					return
				}
				s.cr.Discard(r.k)
				continue
			}
			// Scanning again before the batch ends would be quadratic.
			slowUntilEnd = true
		}
		typ, n, err := peekHeader(s.cr, max)
		if err != nil {
			if e, ok := pgerr.As(err); ok {
				e.Severity = pgerr.SeverityFatal
				s.uw.Flush()
				s.enqueueFatal(e)
				return
			}
			gone()
			return
		}
		if typ == 'S' || typ == 'Q' {
			slowUntilEnd = false
		}
		hdr[0] = typ
		binary.BigEndian.PutUint32(hdr[1:], uint32(n+4))
		s.relayed.c2sMsgs.Add(1)
		s.relayed.c2sBytes.Add(uint64(n) + 5)
		switch typ {
		case 'Q', 'S', 'F', 'c', 'f':
			s.c2sRun = 0 // the end of a statement's input
		default:
			s.c2sRun += n + 5
		}

		// Copy-in: Postgres ignores Sync between the COPY and the copy data
		// (protocol docs, "COPY Operations"), so those Syncs owe nothing.
		switch typ {
		case 'd', 'c', 'f':
			if !copySeen {
				copySeen = true
				s.subDebt(syncsSinceExec)
			}
		case 'Q', 'E', 'F':
			syncsSinceExec, copySeen = 0, false
		}

		if s.intercept == nil || typ == 'd' || typ == 'c' || typ == 'f' || typ == 'F' || typ == 'X' || typ == 'p' {
			// Raw relay. Z-producing frames are counted before they are
			// written, so their ReadyForQuery never precedes its debt.
			switch typ {
			case 'Q', 'F':
				if !s.addDebt(1) {
					return
				}
			case 'S':
				syncsSinceExec++
				if !s.addDebt(1) {
					return
				}
			}
			if typ == 'X' {
				// Mark the end before the server can see the Terminate: its
				// close must read as the client leaving, not as a lost upstream.
				s.clientGone.Store(true)
			}
			if err := s.forwardStream(hdr, n); err != nil {
				gone()
				return
			}
			if typ == 'X' {
				s.uw.Flush()
				return
			}
			continue
		}

		// Interception on: decode what routing needs.
		switch typ {
		case 'Q':
			if n > maxInspect {
				if !s.addDebt(1) {
					return
				}
				if s.forwardStream(hdr, n) != nil {
					gone()
					return
				}
				continue
			}
			if body, err = readBody(s.cr, body, n); err != nil {
				gone()
				return
			}
			if batch.failed {
				continue // Postgres ignores it while skipping to Sync
			}
			if len(batch.local) > 0 || batch.ranLocal {
				// A simple Query inside a mixed batch: the group before it
				// runs, and the proxy's block ends as Postgres ends the
				// implicit transaction of the batch at a Query.
				if !s.runGroup(&batch, false, true, false, nil) {
					return
				}
				failed := batch.failed
				batch.reset()
				if failed {
					continue
				}
			}
			sql := string(body[:max0(len(body)-1)])
			route := s.intercept.Classify(s.info, sql)
			if !route.Local {
				if isDiscardAll(sql) {
					clear(stmts)
					clear(portals)
				}
				if !s.addDebt(1) {
					return
				}
				s.uw.Write(hdr[:])
				s.uw.Write(body)
				continue
			}
			s.srv.metrics.Intercepted(route.Kind)
			if batch.forwarded {
				// Upstream's part of the batch must be answered first.
				if !s.runGroup(&batch, false, false, false, nil) {
					return
				}
				failed := batch.failed
				batch.reset()
				if failed {
					continue
				}
			}
			if !s.runLocal(&localUnit{call: &Call{SQL: sql, Route: route}}) {
				return
			}
		case 'P', 'B', 'D', 'E', 'C':
			if n > batchCap && (typ != 'P' || n > maxInspect) {
				// Too big to hold back: stream it as upstream-owned, after
				// checking the names it refers to. A Parse up to maxInspect
				// is read whole and classified below, like a Query; a larger
				// one passes unclassified, like a larger Query.
				local := false
				if p, err := s.cr.Peek(min(n, 160)); err == nil && !batch.failed {
					switch typ {
					case 'B':
						if portal, rest, ok := cstring(p); ok {
							stmt, _, _ := cstring(rest)
							local = stmts[stmt] != nil
							delete(portals, portal)
						}
					case 'P':
						if name, _, ok := cstring(p); ok {
							delete(stmts, name)
						}
					}
				}
				if batch.failed || local {
					if _, err := s.cr.Discard(n); err != nil {
						gone()
						return
					}
					if local {
						// Fail the batch at this message, as Postgres fails
						// a message it cannot take.
						tooBig := pgerr.Newf(pgerr.ProgramLimitExceeded, "a message of %d bytes is too large for a statement the proxy answers", n)
						if !s.runGroup(&batch, false, false, false, tooBig) {
							return
						}
					}
					continue
				}
				if len(batch.local) > 0 {
					if !s.runGroup(&batch, true, false, false, nil) {
						return
					}
					if batch.failed {
						if _, err := s.cr.Discard(n); err != nil {
							gone()
							return
						}
						continue
					}
				}
				batch.forwarded = true
				batch.executed = batch.executed || typ == 'E'
				if s.forwardStream(hdr, n) != nil {
					gone()
					return
				}
				continue
			}
			if body, err = readBody(s.cr, body, n); err != nil {
				gone()
				return
			}
			if batch.failed {
				continue // skipped to Sync, so it changes nothing, as in Postgres
			}
			lm, local, perr := s.classifyExtended(typ, body, stmts, portals)
			if perr != nil {
				s.uw.Flush()
				s.enqueueFatal(perr)
				return
			}
			if local {
				if typ == 'P' {
					s.srv.metrics.Intercepted(lm.stmt.route.Kind)
				}
				batch.local = append(batch.local, lm)
				continue
			}
			if len(batch.local) > 0 {
				// The group before this ordinary message is whole: it runs
				// at its place, the rest of the batch after it.
				if !s.runGroup(&batch, true, false, false, nil) {
					return
				}
				if batch.failed {
					continue
				}
			}
			// Ordinary: forwarded at once, never held for the rest of the
			// batch (D22), so upstream sees the client's timing (a
			// statement_timeout between Parse and Describe fires as directly).
			batch.forwarded = true
			switch typ {
			case 'E':
				batch.executed = true
			case 'P':
				if batch.ranLocal && lm.rewritten == nil {
					if _, q, ok := scanParse(body); ok && beginsBlock(q) {
						batch.began = true
					}
				}
			}
			if lm.rewritten != nil {
				s.uw.Write(lm.rewritten)
			} else {
				s.uw.Write(hdr[:])
				s.uw.Write(body)
			}
		case 'S', 'H':
			// Their body is empty in a valid stream; keep whatever came, so
			// upstream judges it exactly as it would directly.
			if n > batchCap {
				s.uw.Flush()
				s.enqueueFatal(fatal(pgerr.ProtocolViolation, "invalid message length %d for message type %s", n, quoteTyp(typ)))
				return
			}
			if body, err = readBody(s.cr, body, n); err != nil {
				gone()
				return
			}
			sync := typ == 'S'
			mixed := batch.ranLocal || batch.failed
			switch {
			case !sync && batch.failed:
				// Postgres ignores a Flush while skipping to Sync.
			case !sync && len(batch.local) > 0:
				if !s.runGroup(&batch, true, false, false, nil) {
					return
				}
			case sync && len(batch.local) > 0 && !batch.forwarded && !mixed:
				// The whole batch is the proxy's: answered locally,
				// upstream never sees it.
				batch.local = append(batch.local, localMsg{typ: typ})
				msgs := batch.local
				batch.reset()
				if !s.runLocal(&localUnit{msgs: msgs}) {
					return
				}
			case sync && (mixed || len(batch.local) > 0):
				// Answered by the proxy: upstream owes nothing for it.
				if !s.runGroup(&batch, false, true, true, nil) {
					return
				}
				batch.reset()
			default:
				if sync {
					syncsSinceExec++
					if !s.addDebt(1) {
						return
					}
				}
				s.uw.Write(hdr[:])
				s.uw.Write(body)
				if sync {
					batch.reset()
				}
			}
		default:
			if s.forwardStream(hdr, n) != nil {
				gone()
				return
			}
		}
		if cap(body) > batchCap {
			body = nil
		}
	}
}

func max0(n int) int {
	if n < 0 {
		return 0
	}
	return n
}

func isDiscardAll(sql string) bool {
	f := strings.Fields(strings.ToLower(sql))
	return len(f) >= 2 && (f[0] == "discard" || f[0] == "deallocate") && strings.TrimSuffix(f[1], ";") == "all"
}

// classifyExtended decides the owner of one extended-protocol message and
// keeps the statement and portal ownership maps.
func (s *session) classifyExtended(typ byte, body []byte, stmts map[string]*localStmt, portals map[string]*localPortal) (localMsg, bool, *pgerr.Error) {
	bad := func() (localMsg, bool, *pgerr.Error) {
		return localMsg{}, false, fatal(pgerr.ProtocolViolation, "invalid message format for message type %s", quoteTyp(typ))
	}
	switch typ {
	case 'P':
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
			return localMsg{typ: 'P', rewritten: f}, false, nil
		}
		var p pgproto3.Parse
		if p.Decode(body) != nil {
			return bad()
		}
		st := &localStmt{name: p.Name, sql: p.Query, route: route, paramOIDs: append([]uint32(nil), p.ParameterOIDs...)}
		stmts[p.Name] = st
		return localMsg{typ: 'P', stmt: st}, true, nil
	case 'B':
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
		return localMsg{typ: 'B', portal: po}, true, nil
	case 'D', 'C':
		if len(body) < 2 {
			return bad()
		}
		name, _, ok := scanCString(body[1:])
		if !ok {
			return bad()
		}
		switch body[0] {
		case 'S':
			st := stmts[string(name)]
			if typ == 'C' && st != nil {
				delete(stmts, string(name))
			}
			return localMsg{typ: typ, objType: 'S', stmt: st}, st != nil, nil
		case 'P':
			po := portals[string(name)]
			if typ == 'C' && po != nil {
				delete(portals, string(name))
			}
			return localMsg{typ: typ, objType: 'P', portal: po}, po != nil, nil
		}
		return bad()
	case 'E':
		portal, rest, ok := scanCString(body)
		if !ok || len(rest) < 4 {
			return bad()
		}
		po := portals[string(portal)]
		return localMsg{typ: 'E', portal: po, maxRows: binary.BigEndian.Uint32(rest)}, po != nil, nil
	}
	return localMsg{}, false, nil
}

// forwardStream writes a frame header and streams its body from the client
// to the upstream straight from the read buffer, without holding it whole or
// allocating.
func (s *session) forwardStream(hdr [5]byte, n int) error {
	if _, err := s.uw.Write(hdr[:]); err != nil {
		return err
	}
	for n > 0 {
		if s.cr.Buffered() == 0 {
			if s.c2sRun > growAfter && s.cr == s.crSmall {
				if err := growWriter(&s.uw, s.up); err != nil {
					return err
				}
				growReader(&s.cr, s.client)
			}
			if _, err := s.cr.Peek(1); err != nil {
				return err
			}
		}
		b, _ := s.cr.Peek(min(n, s.cr.Buffered()))
		if _, err := s.uw.Write(b); err != nil {
			return err
		}
		s.cr.Discard(len(b))
		n -= len(b)
	}
	return nil
}

// runLocal hands a unit to the server→client pump and waits until it is done;
// false means the session ended meanwhile.
func (s *session) runLocal(u *localUnit) bool {
	if err := s.uw.Flush(); err != nil {
		return false
	}
	u.done = make(chan struct{})
	if !s.enqueueUnit(u) {
		return false
	}
	// While the unit runs, this pump has nothing to read, so it watches the
	// client socket: a client that disconnects cancels the unit (a wait
	// would otherwise run to its timeout for nobody). What a pipelining
	// client sends meanwhile stays buffered for the loop.
	watch := make(chan error, 1)
	go func() {
		_, err := s.cr.Peek(1)
		watch <- err
	}()
	stopWatching := func() {
		s.client.SetReadDeadline(time.Unix(1, 0))
		<-watch
		s.client.SetReadDeadline(time.Time{})
	}
	select {
	case <-u.done:
		stopWatching()
		return true
	case err := <-watch:
		if err != nil && !isTimeout(err) {
			s.clientLeft()
		}
	case <-s.ctx.Done():
		stopWatching()
		return false
	}
	select {
	case <-u.done:
		return true
	case <-s.ctx.Done():
		return false
	}
}

func (s *session) enqueueUnit(u *localUnit) bool {
	s.mu.Lock()
	if s.endingLocked() {
		s.mu.Unlock()
		s.wake()
		return false
	}
	s.plan = append(s.plan, &planEntry{unit: u})
	front := len(s.plan) == 1
	s.mu.Unlock()
	if front {
		s.wake()
	}
	return true
}

// enqueueFatal ends the session at the next frame boundary with a FATAL
// (a client protocol violation): it jumps the queue, because replies still
// owed by upstream may never come for a stream it could not parse.
func (s *session) enqueueFatal(e *pgerr.Error) {
	s.mu.Lock()
	s.plan = append([]*planEntry{{unit: &localUnit{fatal: e}}}, s.plan...)
	s.mu.Unlock()
	s.wake()
}

// addDebt accounts n ReadyForQuery frames upstream will owe for frames about
// to be written. It returns false, and the caller must write nothing, once a
// shutdown found the session idle: a statement the client sends after that
// must not start (Shutdown ends idle sessions at once), and the check shares
// the lock with the server→client pump's idle check, so a statement is either
// accounted before the pump ends the session or refused.
func (s *session) addDebt(n int) bool {
	s.mu.Lock()
	if s.endingLocked() {
		s.mu.Unlock()
		s.wake()
		return false
	}
	if k := len(s.plan); k > 0 && s.plan[k-1].unit == nil {
		s.plan[k-1].owed += n
	} else {
		s.plan = append(s.plan, &planEntry{owed: n})
	}
	s.mu.Unlock()
	return true
}

// endingLocked reports that shutdown ends the session now: forced, or
// graceful with nothing owed and no transaction open. Callers hold s.mu.
func (s *session) endingLocked() bool {
	return s.shutdown == 2 || s.shutdown == 1 && len(s.plan) == 0 && s.info.TxStatus() == 'I'
}

func (s *session) subDebt(n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	if k := len(s.plan); k > 0 && s.plan[k-1].unit == nil {
		e := s.plan[k-1]
		e.owed -= n
		if e.owed <= 0 {
			s.plan = s.plan[:k-1]
		}
	}
	s.mu.Unlock()
}

func (s *session) closeUpstream() {
	s.mu.Lock()
	up := s.up
	s.mu.Unlock()
	up.Close()
}

func (s *session) closeClientSide() {
	s.clientGone.Store(true)
	s.closeUpstream()
}

var errShutdown = errors.New("shutdown")

// serverToClient is the server→client pump: the only writer of the client
// socket. It relays upstream frames and runs local units at their barriers.
func (s *session) serverToClient() string {
	max := s.srv.cfg.MaxServerMessageSize
	var hdr [5]byte
	for {
		if oc, end := s.runPlanFront(); end {
			return oc
		}
		if s.ur.Buffered() < 5 {
			if s.s2cRun == 0 && s.ur.Buffered() == 0 && s.ur != s.urSmall {
				// The reply is over: give the big buffers back.
				if shrinkWriter(&s.cw, s.cwSmall) != nil {
					return "client_gone"
				}
				shrinkReader(&s.ur, s.urSmall)
			}
			if err := s.cw.Flush(); err != nil {
				return "client_gone"
			}
		} else {
			// Relay the whole frames that need no look (DataRow, CopyData,
			// CommandComplete, ...) straight from the read buffer in one
			// write: no per-frame copy or call.
			b, _ := s.ur.Peek(s.ur.Buffered())
			if k, msgs := scanPassive(b, max); k > 0 {
				s.relayed.s2cMsgs.Add(uint64(msgs))
				s.relayed.s2cBytes.Add(uint64(k))
				s.s2cRun += k
				if _, err := s.cw.Write(b[:k]); err != nil {
					return "client_gone"
				}
				s.ur.Discard(k)
				continue
			}
		}
		typ, n, err := peekHeader(s.ur, max)
		if err != nil {
			if isTimeout(err) {
				s.clearWake()
				continue
			}
			return s.upstreamLost(err)
		}
		hdr[0] = typ
		binary.BigEndian.PutUint32(hdr[1:], uint32(n+4))
		s.relayed.s2cMsgs.Add(1)
		s.relayed.s2cBytes.Add(uint64(n) + 5)
		if typ == 'Z' {
			s.s2cRun = 0
		} else {
			s.s2cRun += n + 5
		}
		inspect := typ
		if n > maxInspect {
			inspect = 0 // absurdly large: relay it without decoding
		}
		switch inspect {
		case 'Z', 'S', 'E', 'K':
			body, err := s.readUpstreamBody(n)
			if err != nil {
				return s.upstreamLost(err)
			}
			if typ == 'Z' && len(body) == 1 {
				s.info.setTxStatus(body[0])
				s.batchErr = false
				s.payDebt()
			}
			if typ == 'S' {
				s.noteParameterStatus(body)
			}
			fatalErr := false
			if typ == 'E' {
				s.batchErr = true
				var er pgproto3.ErrorResponse
				if er.Decode(body) == nil {
					s.srv.metrics.ErrorSent("upstream", er.Code)
					if er.Severity == "FATAL" || er.Severity == "PANIC" {
						fatalErr = true
						s.log.Debug("upstream FATAL", "sqlstate", er.Code, "message", er.Message)
					}
				}
			}
			if err := s.writeFrame(typ, body); err != nil {
				return "client_gone"
			}
			if cap(s.sbuf) > 1<<20 {
				s.sbuf = nil
			}
			if fatalErr {
				s.cw.Flush()
				return "upstream_error"
			}
		default:
			if _, err := s.cw.Write(hdr[:]); err != nil {
				return "client_gone"
			}
			if err := s.copyUpstreamBody(n); err != nil {
				if errors.Is(err, errClientWrite) {
					return "client_gone"
				}
				return s.upstreamLost(err)
			}
		}
	}
}

var errClientWrite = errors.New("client write failed")

// copyUpstreamBody streams n body bytes to the client straight from the
// read buffer, riding over wake-up deadlines (a partial read is simply
// continued).
func (s *session) copyUpstreamBody(n int) error {
	for n > 0 {
		if s.ur.Buffered() == 0 {
			if s.s2cRun > growAfter && s.ur == s.urSmall {
				if growWriter(&s.cw, s.client) != nil {
					return errClientWrite
				}
				growReader(&s.ur, s.up)
			}
			if _, err := s.ur.Peek(1); err != nil {
				if isTimeout(err) {
					s.clearWake()
					continue
				}
				if _, werr := s.cw.Write(nil); werr != nil {
					return errClientWrite
				}
				return err
			}
		}
		b, _ := s.ur.Peek(min(n, s.ur.Buffered()))
		if _, err := s.cw.Write(b); err != nil {
			return errClientWrite
		}
		s.ur.Discard(len(b))
		n -= len(b)
	}
	return nil
}

func (s *session) readUpstreamBody(n int) ([]byte, error) {
	if cap(s.sbuf) < n {
		s.sbuf = make([]byte, n)
	}
	buf := s.sbuf[:n]
	for off := 0; off < n; {
		m, err := io.ReadFull(s.ur, buf[off:])
		off += m
		if err != nil {
			if isTimeout(err) {
				s.clearWake()
				continue
			}
			return nil, err
		}
	}
	return buf, nil
}

func (s *session) clearWake() {
	s.wakePending.Store(false)
	s.up.SetReadDeadline(time.Time{})
}

// payDebt accounts one relayed ReadyForQuery.
func (s *session) payDebt() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.plan) == 0 || s.plan[0].unit != nil {
		return
	}
	e := s.plan[0]
	e.owed--
	if e.owed <= 0 {
		s.plan = s.plan[1:]
	}
}

// runPlanFront runs local units that reached the front of the plan and
// handles shutdown; end reports that the session is over.
func (s *session) runPlanFront() (outcome string, end bool) {
	for {
		s.mu.Lock()
		var front *planEntry
		if len(s.plan) > 0 {
			front = s.plan[0]
		}
		ending := s.endingLocked()
		s.mu.Unlock()
		if front == nil || front.unit == nil {
			if ending {
				s.cw.Write(encodeError(s.wbuf[:0], fatal(pgerr.AdminShutdown, "terminating connection due to administrator command"), false, nil))
				s.cw.Flush()
				return "shutdown", true
			}
			return "", false
		}
		u := front.unit
		err := s.runUnit(u)
		s.mu.Lock()
		if len(s.plan) > 0 && s.plan[0] == front {
			s.plan = s.plan[1:]
		}
		s.mu.Unlock()
		if u.done != nil {
			close(u.done)
		}
		if err != nil {
			s.cw.Flush()
			if u.fatal != nil {
				return "client_error", true
			}
			if errors.Is(err, errClientWrite) {
				return "client_gone", true
			}
			return s.upstreamLost(err), true
		}
		if err := s.cw.Flush(); err != nil {
			return "client_gone", true
		}
	}
}

// upstreamLost tells the client (when it is still there) that the upstream
// connection ended, as Postgres's own client libraries would see it.
func (s *session) upstreamLost(err error) string {
	if s.clientGone.Load() {
		return "client_gone"
	}
	s.mu.Lock()
	level := s.shutdown
	s.mu.Unlock()
	if level > 0 {
		s.cw.Write(encodeError(s.wbuf[:0], fatal(pgerr.AdminShutdown, "terminating connection due to administrator command"), false, nil))
		s.cw.Flush()
		return "shutdown"
	}
	if e, ok := pgerr.As(err); ok && e.Code == pgerr.ProtocolViolation {
		s.log.Warn("upstream protocol violation", "error", err)
	} else {
		s.log.Info("upstream connection lost", "error", err)
	}
	s.cw.Write(encodeError(s.wbuf[:0], fatal(pgerr.ConnectionFailure, "lost connection to the upstream server"), false, nil))
	s.cw.Flush()
	return "upstream_error"
}

// routedRun is the part of a buffered client stream the routed path may
// forward as raw frames: whole batches whose every frame stays upstream's.
type routedRun struct {
	k, msgs, debt, lastEnd int
	syncs                  int  // syncsSinceExec after the run
	flushed                bool // the run ends at a Flush inside a batch
	executed               bool // ... and an Execute of that batch is in it
}

// scanRouted finds, at the start of b, the whole frames the interceptor
// would leave to upstream unchanged, ending at a Sync, a Flush or a simple
// Query, so they can be written in one go instead of being decoded and held
// back frame by frame (D1). It looks only at a Parse's or Query's text (the
// interceptor's Classify, the router's prefilter for ordinary SQL) and at
// the names a frame refers to. Everything else stops the run before the
// frame, for the frame-by-frame path: a local or rewritten statement, a
// name of a local statement or portal, a malformed or oversized frame, and
// the frames of copy, function call and Terminate. The run ends only at a
// batch's end or at a Flush, and reports whether an Execute of the batch
// it leaves open went upstream, so a group later in that batch settles it
// exactly (batch.go). pending says frames of the current batch already went
// upstream.
func (s *session) scanRouted(b []byte, max int, syncs int, pending bool, stmts map[string]*localStmt, portals map[string]*localPortal) routedRun {
	var r routedRun
	r.syncs = syncs
	k, msgs, debt, executed := 0, 0, 0, false
	for len(b)-k >= 5 {
		typ := b[k]
		l := int64(binary.BigEndian.Uint32(b[k+1:]))
		if l < 4 || l-4 > int64(max) || int64(len(b)-k-1) < l {
			break
		}
		body := b[k+5 : k+1+int(l)]
		switch typ {
		case 'P':
			if len(body) > maxInspect {
				return r
			}
			name, query, ok := scanParse(body)
			if !ok || stmts[string(name)] != nil {
				return r
			}
			if route := s.intercept.Classify(s.info, string(query)); route.Local || route.Rewrite != "" {
				return r
			}
		case 'B':
			portal, stmt, ok := scanBind(body)
			if !ok || stmts[string(stmt)] != nil || portals[string(portal)] != nil {
				return r
			}
		case 'D', 'C':
			if len(body) < 2 || body[0] != 'S' && body[0] != 'P' {
				return r
			}
			name, _, ok := scanCString(body[1:])
			if !ok || body[0] == 'S' && stmts[string(name)] != nil || body[0] == 'P' && portals[string(name)] != nil {
				return r
			}
		case 'E':
			portal, rest, ok := scanCString(body)
			if !ok || len(rest) < 4 || portals[string(portal)] != nil {
				return r
			}
			syncs = 0
			executed = true
		case 'S', 'H':
			if len(body) > batchCap {
				return r
			}
		case 'Q':
			if pending || len(body) > maxInspect {
				return r
			}
			sql := string(body[:max0(len(body)-1)])
			if s.intercept.Classify(s.info, sql).Local || (len(stmts) > 0 || len(portals) > 0) && isDiscardAll(sql) {
				return r
			}
			syncs = 0
		default:
			return r
		}
		k += int(l) + 1
		msgs++
		switch typ {
		case 'S':
			syncs++
			debt++
			fallthrough
		case 'Q':
			if typ == 'Q' {
				debt++
			}
			pending, executed = false, false
			r = routedRun{k: k, msgs: msgs, debt: debt, lastEnd: k, syncs: syncs}
		case 'H':
			r = routedRun{k: k, msgs: msgs, debt: debt, lastEnd: r.lastEnd, syncs: syncs, flushed: true, executed: executed}
		default:
			pending = true
		}
	}
	return r
}
