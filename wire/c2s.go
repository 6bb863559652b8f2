package wire

// The client→server pump: reads the client's frames and forwards the
// ordinary ones upstream as soon as it knows them to be ordinary (D22).

import (
	"encoding/binary"
	"strings"
	"unsafe"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

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
		s.uw.Write([]byte{msgTerminate, 0, 0, 0, 4})
		s.uw.Flush()
		s.closeUpstream()
	}
	for {
		if s.cr.Buffered() < 5 {
			if s.c2sRun == 0 && s.cr.Buffered() == 0 && s.cr.big {
				// The stream is over: back to small buffers.
				if s.uw.shrink() != nil {
					s.closeClientSide()
					return
				}
				s.cr.shrink()
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
				if s.intercept != nil && typ != msgCopyData {
					break
				}
				switch typ {
				case msgCopyData, msgCopyDone, msgCopyFail:
					if !cs {
						break scan
					}
				case msgTerminate:
					break scan
				case msgQuery, msgFunctionCall:
					syncs, cs = 0, false
					debt++
				case msgExecute:
					syncs, cs = 0, false
				case msgSync:
					syncs++
					debt++
				}
				k += 1 + int(l)
				msgs++
				switch typ {
				case msgQuery, msgSync, msgFunctionCall, msgCopyDone, msgCopyFail:
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
		if typ == msgSync || typ == msgQuery {
			slowUntilEnd = false
		}
		hdr[0] = typ
		binary.BigEndian.PutUint32(hdr[1:], uint32(n+4))
		s.relayed.c2sMsgs.Add(1)
		s.relayed.c2sBytes.Add(uint64(n) + 5)
		switch typ {
		case msgQuery, msgSync, msgFunctionCall, msgCopyDone, msgCopyFail:
			s.c2sRun = 0 // the end of a statement's input
		default:
			s.c2sRun += n + 5
		}

		// Copy-in: Postgres ignores Sync between the COPY and the copy data
		// (protocol docs, "COPY Operations"), so those Syncs owe nothing.
		switch typ {
		case msgCopyData, msgCopyDone, msgCopyFail:
			if !copySeen {
				copySeen = true
				s.subDebt(syncsSinceExec)
			}
		case msgQuery, msgExecute, msgFunctionCall:
			syncsSinceExec, copySeen = 0, false
		}

		if s.intercept == nil || typ == msgCopyData || typ == msgCopyDone || typ == msgCopyFail || typ == msgFunctionCall || typ == msgTerminate || typ == msgPassword {
			// Raw relay. Z-producing frames are counted before they are
			// written, so their ReadyForQuery never precedes its debt.
			switch typ {
			case msgQuery, msgFunctionCall:
				if !s.addDebt(1) {
					return
				}
			case msgSync:
				syncsSinceExec++
				if !s.addDebt(1) {
					return
				}
			}
			if typ == msgTerminate {
				// Mark the end before the server can see the Terminate: its
				// close must read as the client leaving, not as a lost upstream.
				s.clientGone.Store(true)
			}
			if err := s.forwardStream(hdr, n); err != nil {
				gone()
				return
			}
			if typ == msgTerminate {
				s.uw.Flush()
				return
			}
			continue
		}

		// Interception on: decode what routing needs.
		switch typ {
		case msgQuery:
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
		case msgParse, msgBind, msgDescribe, msgExecute, msgClose:
			if n > batchCap && (typ != msgParse || n > maxInspect) {
				// Too big to hold back: stream it as upstream-owned, after
				// checking the names it refers to. A Parse up to maxInspect
				// is read whole and classified below, like a Query; a larger
				// one passes unclassified, like a larger Query.
				local := false
				if p, err := s.cr.Peek(min(n, 160)); err == nil && !batch.failed {
					switch typ {
					case msgBind:
						if portal, rest, ok := cstring(p); ok {
							stmt, _, _ := cstring(rest)
							local = stmts[stmt] != nil
							delete(portals, portal)
						}
					case msgParse:
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
					if local && len(batch.local) > 0 {
						if !s.runGroup(&batch, true, false, false, nil) {
							return
						}
					}
					if local && !batch.failed {
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
				batch.executed = batch.executed || typ == msgExecute
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
				if typ == msgParse {
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
			case msgExecute:
				batch.executed = true
			case msgParse:
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
		case msgSync, msgFlush:
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
			sync := typ == msgSync
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

// lentString views b as a string without copying, for a call that does not
// keep it (the bytes are the read buffer's and change at the next read).
func lentString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

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

// forwardStream writes a frame header and streams its body from the client
// to the upstream straight from the read buffer, without holding it whole or
// allocating.
func (s *session) forwardStream(hdr [5]byte, n int) error {
	// Written from the session, not the parameter: a Write may hand its
	// slice to the socket, which would move the parameter to the heap.
	s.c2sHdr = hdr
	if _, err := s.uw.Write(s.c2sHdr[:]); err != nil {
		return err
	}
	for n > 0 {
		if s.cr.Buffered() == 0 {
			if s.c2sRun > growAfter && !s.cr.big {
				if err := s.uw.grow(); err != nil {
					return err
				}
				s.cr.grow()
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
		case msgParse:
			if len(body) > maxInspect {
				return r
			}
			name, query, ok := scanParse(body)
			if !ok || stmts[string(name)] != nil {
				return r
			}
			// The text is lent, not copied: a route that keeps it (Local or
			// Rewrite) stops the run, and the frame-by-frame path classifies
			// a copy of its own (Interceptor.Classify).
			if route := s.intercept.Classify(s.info, lentString(query)); route.Local || route.Rewrite != "" {
				return r
			}
		case msgBind:
			portal, stmt, ok := scanBind(body)
			if !ok || stmts[string(stmt)] != nil || portals[string(portal)] != nil {
				return r
			}
		case msgDescribe, msgClose:
			if len(body) < 2 || body[0] != objStatement && body[0] != objPortal {
				return r
			}
			name, _, ok := scanCString(body[1:])
			if !ok || body[0] == objStatement && stmts[string(name)] != nil || body[0] == objPortal && portals[string(name)] != nil {
				return r
			}
		case msgExecute:
			portal, rest, ok := scanCString(body)
			if !ok || len(rest) < 4 || portals[string(portal)] != nil {
				return r
			}
			syncs = 0
			executed = true
		case msgSync, msgFlush:
			if len(body) > batchCap {
				return r
			}
		case msgQuery:
			if pending || len(body) > maxInspect {
				return r
			}
			sql := lentString(body[:max0(len(body)-1)])
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
		case msgSync:
			syncs++
			debt++
			fallthrough
		case msgQuery:
			if typ == msgQuery {
				debt++
			}
			pending, executed = false, false
			r = routedRun{k: k, msgs: msgs, debt: debt, lastEnd: k, syncs: syncs}
		case msgFlush:
			r = routedRun{k: k, msgs: msgs, debt: debt, lastEnd: r.lastEnd, syncs: syncs, flushed: true, executed: executed}
		default:
			pending = true
		}
	}
	return r
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
