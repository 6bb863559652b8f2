package wire

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Reserved names for the proxy's own statements on a lent upstream, so the
// client's unnamed statement and portal are never clobbered.
const (
	lentStmt   = "_trellis_proxy_stmt"
	lentPortal = "_trellis_proxy_portal"
)

// runUnit executes a local unit on the server→client pump. Nothing is owed
// by upstream when it runs. A non-nil error ends the session.
func (s *session) runUnit(u *localUnit) error {
	if u.fatal != nil {
		s.cw.Write(encodeError(s.wbuf[:0], u.fatal, false, s.srv.log))
		return errors.New("client protocol violation")
	}
	ctx, cancel := context.WithCancelCause(s.ctx)
	s.mu.Lock()
	s.unitCancel = cancel
	if s.leftMidUnit {
		cancel(errClientLeft)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.unitCancel = nil
		s.mu.Unlock()
		cancel(nil)
	}()
	up := &lentUpstream{s: s}
	w := &resultWriter{s: s}
	switch {
	case u.err != nil:
		w.Error(u.err)
	case u.call != nil:
		s.execute(ctx, u.call, up, w)
	case u.step != nil:
		s.runStep(ctx, u, up, w)
	default:
		s.runExtended(ctx, u.msgs, up, w)
	}
	if up.broken != nil {
		return up.broken
	}
	if w.err != nil {
		return errClientWrite
	}
	if u.z || u.call != nil {
		s.writeFrame(msgReadyForQuery, []byte{s.info.TxStatus()})
	}
	// Notifications and parameter changes that arrived meanwhile follow the
	// unit's reply, like Postgres delivers them between whole replies.
	for _, f := range s.held {
		s.cw.Write(f)
	}
	s.held = nil
	return nil
}

func (s *session) execute(ctx context.Context, c *Call, up *lentUpstream, w *resultWriter) bool {
	err := s.srv.intercep.Execute(ctx, s.info, c, up, w)
	if err == nil {
		return true
	}
	var fe *ForwardedError
	if errors.As(err, &fe) {
		return false
	}
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil && !isPg(err) {
		err = cause
	}
	w.Error(asPgErr(err))
	return false
}

func isPg(err error) bool { _, ok := pgerr.As(err); return ok }

// runExtended answers an extended-protocol batch of local statements; false
// means one failed (and what followed it up to a Sync was skipped).
func (s *session) runExtended(ctx context.Context, msgs []localMsg, up *lentUpstream, w *resultWriter) bool {
	failed := false
	for _, m := range msgs {
		if failed && m.typ != msgSync {
			continue
		}
		switch m.typ {
		case msgParse:
			w.frame(msgParseComplete, nil)
		case msgBind:
			w.frame(msgBindComplete, nil)
		case msgClose:
			w.frame(msgCloseComplete, nil)
		case msgDescribe:
			st := m.stmt
			if m.objType == objPortal {
				st = m.portal.stmt
			}
			if m.objType == objStatement {
				oids := st.paramOIDs
				if pdr, ok := s.srv.intercep.(ParamDescriber); ok && len(oids) == 0 {
					oids = pdr.DescribeParams(s.info, st.sql, st.route)
				}
				pd := pgproto3.ParameterDescription{ParameterOIDs: oids}
				out, _ := pd.Encode(s.wbuf[:0])
				w.raw(out)
			}
			var fields []pgproto3.FieldDescription
			if d, ok := s.srv.intercep.(Describer); ok {
				f, err := d.Describe(s.info, st.sql, st.route)
				if err != nil {
					w.Error(asPgErr(err))
					failed = true
					continue
				}
				fields = f
			}
			if len(fields) == 0 {
				w.frame(msgNoData, nil)
				continue
			}
			if m.objType == objPortal {
				fields = append([]pgproto3.FieldDescription(nil), fields...)
				for i := range fields {
					fields[i].Format = formatFor(m.portal.resultFormats, i)
				}
			}
			rd := pgproto3.RowDescription{Fields: fields}
			out, _ := rd.Encode(s.wbuf[:0])
			w.raw(out)
		case msgExecute:
			po := m.portal
			c := &Call{SQL: po.stmt.sql, Route: po.stmt.route, Extended: true, ParamOIDs: po.stmt.paramOIDs,
				ParamFormats: po.paramFormats, Params: po.params, ResultFormats: po.resultFormats, MaxRows: m.maxRows}
			w.extended = true
			if !s.execute(ctx, c, up, w) {
				failed = true
			}
			w.extended = false
		case msgSync:
			s.writeFrame(msgReadyForQuery, []byte{s.info.TxStatus()})
			failed = false
		case msgFlush:
		}
		if up.broken != nil || w.err != nil {
			return false
		}
	}
	return !failed
}

func formatFor(formats []int16, i int) int16 {
	switch {
	case len(formats) == 0:
		return 0
	case len(formats) == 1:
		return formats[0]
	case i < len(formats):
		return formats[i]
	}
	return 0
}

// resultWriter is wire's ResultWriter: it encodes frames to the client.
type resultWriter struct {
	s        *session
	extended bool
	err      error
}

func (w *resultWriter) raw(b []byte) error {
	if w.err == nil {
		_, w.err = w.s.cw.Write(b)
	}
	return w.err
}

func (w *resultWriter) frame(typ byte, body []byte) error {
	if w.err == nil {
		w.err = w.s.writeFrame(typ, body)
	}
	return w.err
}

func (w *resultWriter) RowDescription(fields []pgproto3.FieldDescription) error {
	if w.extended {
		return w.err // the client got it from Describe
	}
	rd := pgproto3.RowDescription{Fields: fields}
	out, _ := rd.Encode(w.s.wbuf[:0])
	return w.raw(out)
}

func (w *resultWriter) DataRow(values [][]byte) error {
	dr := pgproto3.DataRow{Values: values}
	out, _ := dr.Encode(w.s.wbuf[:0])
	return w.raw(out)
}

func (w *resultWriter) CommandComplete(tag string) error {
	cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
	out, _ := cc.Encode(w.s.wbuf[:0])
	return w.raw(out)
}

func (w *resultWriter) EmptyQueryResponse() error { return w.frame(msgEmptyQueryResponse, nil) }

func (w *resultWriter) Notice(n *pgerr.Error) error {
	return w.raw(encodeError(w.s.wbuf[:0], n, true, w.s.srv.log))
}

func (w *resultWriter) Error(e *pgerr.Error) error {
	w.s.srv.metrics.ErrorSent("proxy", e.Code)
	return w.raw(encodeError(w.s.wbuf[:0], e, false, w.s.srv.log))
}

// lentUpstream is the Upstream handed to Interceptor.Execute.
type lentUpstream struct {
	s      *session
	buf    []byte
	broken error // the upstream connection failed: the session ends
}

func (l *lentUpstream) TxStatus() byte { return l.s.info.TxStatus() }

func (l *lentUpstream) Exec(ctx context.Context, sql string, args ...any) (string, error) {
	r, err := l.run(ctx, sql, args, false)
	if err != nil {
		return "", err
	}
	return r.Tag, nil
}

func (l *lentUpstream) Query(ctx context.Context, sql string, args ...any) (*Result, error) {
	return l.run(ctx, sql, args, true)
}

func (l *lentUpstream) run(ctx context.Context, sql string, args []any, rows bool) (*Result, error) {
	if l.broken != nil {
		return nil, l.broken
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	params := make([][]byte, len(args))
	for i, a := range args {
		p, err := encodeArg(a)
		if err != nil {
			return nil, pgerr.Newf(pgerr.InternalError, "argument $%d: %v", i+1, err)
		}
		params[i] = p
	}
	b := l.buf[:0]
	b, _ = (&pgproto3.Close{ObjectType: objPortal, Name: lentPortal}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: objStatement, Name: lentStmt}).Encode(b)
	b, _ = (&pgproto3.Parse{Name: lentStmt, Query: sql}).Encode(b)
	b, _ = (&pgproto3.Bind{DestinationPortal: lentPortal, PreparedStatement: lentStmt, Parameters: params}).Encode(b)
	b, _ = (&pgproto3.Describe{ObjectType: objPortal, Name: lentPortal}).Encode(b)
	b, _ = (&pgproto3.Execute{Portal: lentPortal}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: objPortal, Name: lentPortal}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: objStatement, Name: lentStmt}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	l.buf = b
	res := &Result{}
	var first *pgerr.Error
	err := l.roundTrip(ctx, b, func(typ byte, body []byte) error {
		switch typ {
		case msgRowDescription:
			if rows {
				var rd pgproto3.RowDescription
				if rd.Decode(body) == nil {
					res.Fields = make([]pgproto3.FieldDescription, len(rd.Fields))
					for i, f := range rd.Fields {
						f.Name = append([]byte(nil), f.Name...)
						res.Fields[i] = f
					}
				}
			}
		case msgDataRow:
			if rows {
				var dr pgproto3.DataRow
				if dr.Decode(body) == nil {
					row := make([][]byte, len(dr.Values))
					for i, v := range dr.Values {
						if v != nil {
							row[i] = append([]byte{}, v...)
						}
					}
					res.Rows = append(res.Rows, row)
				}
			}
		case msgCommandComplete:
			var cc pgproto3.CommandComplete
			if cc.Decode(body) == nil {
				res.Tag = string(cc.CommandTag)
			}
		case msgErrorResponse:
			var er pgproto3.ErrorResponse
			if er.Decode(body) == nil && first == nil {
				first = errorFromResponse(&er)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if first != nil {
		return nil, first
	}
	return res, nil
}

// roundTrip writes msgs (ending in Sync or a Query) and hands every reply
// frame to fn until ReadyForQuery, which it consumes. A cancelled ctx sends a
// CancelRequest upstream, so the backend stops and the reply still ends.
func (l *lentUpstream) roundTrip(ctx context.Context, msgs []byte, fn func(typ byte, body []byte) error) error {
	s := l.s
	if _, err := s.uw.Write(msgs); err != nil {
		l.broken = err
		return err
	}
	if err := s.uw.Flush(); err != nil {
		l.broken = err
		return err
	}
	stop := context.AfterFunc(ctx, s.cancelUpstream)
	defer stop()
	for {
		typ, n, err := peekHeader(s.ur, s.srv.cfg.MaxServerMessageSize)
		if err != nil {
			if isTimeout(err) {
				s.clearWake()
				continue
			}
			l.broken = err
			return err
		}
		if n > maxInspect {
			l.broken = pgerr.Newf(pgerr.ProgramLimitExceeded, "message of %d bytes too large for a proxy query", n)
			return l.broken
		}
		body, err := s.readUpstreamBody(n)
		if err != nil {
			l.broken = err
			return err
		}
		switch typ {
		case msgReadyForQuery:
			if len(body) == 1 {
				s.info.setTxStatus(body[0])
			}
			s.batchErr = false
			return nil
		case msgNotification:
			s.held = append(s.held, frameCopy(typ, body))
			continue
		case msgParameterStatus:
			s.noteParameterStatus(body)
			s.held = append(s.held, frameCopy(typ, body))
			continue
		}
		if err := fn(typ, body); err != nil {
			return err
		}
	}
}

func frameCopy(typ byte, body []byte) []byte {
	f := appendHeader(make([]byte, 0, len(body)+5), typ, len(body))
	return append(f, body...)
}

// Forward sends sql as a simple Query and relays its replies to the client.
func (l *lentUpstream) Forward(ctx context.Context, sql string, w ResultWriter) error {
	if l.broken != nil {
		return l.broken
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	s := l.s
	own, raw := w.(*resultWriter)
	raw = raw && !own.extended
	b, _ := (&pgproto3.Query{String: sql}).Encode(l.buf[:0])
	l.buf = b
	var fe *ForwardedError
	err := l.roundTrip(ctx, b, func(typ byte, body []byte) error {
		switch typ {
		case msgErrorResponse:
			var er pgproto3.ErrorResponse
			if er.Decode(body) == nil && fe == nil {
				fe = &ForwardedError{Err: errorFromResponse(&er)}
			}
		case msgCopyInResponse, msgCopyBothResponse:
			// COPY FROM STDIN needs the client's data: refuse it.
			cf, _ := (&pgproto3.CopyFail{Message: "COPY FROM STDIN is not supported inside a statement the proxy runs"}).Encode(nil)
			s.uw.Write(cf)
			s.uw.Flush()
			return nil
		}
		if raw {
			return own.frame(typ, body)
		}
		return relayDecoded(w, typ, body)
	})
	if err != nil {
		return err
	}
	if fe != nil {
		if !raw {
			w.Error(fe.Err)
		}
		return fe
	}
	return nil
}

func relayDecoded(w ResultWriter, typ byte, body []byte) error {
	switch typ {
	case msgRowDescription:
		var rd pgproto3.RowDescription
		if rd.Decode(body) == nil {
			return w.RowDescription(rd.Fields)
		}
	case msgDataRow:
		var dr pgproto3.DataRow
		if dr.Decode(body) == nil {
			return w.DataRow(dr.Values)
		}
	case msgCommandComplete:
		var cc pgproto3.CommandComplete
		if cc.Decode(body) == nil {
			return w.CommandComplete(string(cc.CommandTag))
		}
	case msgEmptyQueryResponse:
		return w.EmptyQueryResponse()
	case msgNoticeResponse:
		var nr pgproto3.NoticeResponse
		if nr.Decode(body) == nil {
			er := pgproto3.ErrorResponse(nr)
			return w.Notice(errorFromResponse(&er))
		}
	}
	return nil
}

func encodeArg(a any) ([]byte, error) {
	switch v := a.(type) {
	case nil:
		return nil, nil
	case string:
		return append([]byte{}, v...), nil
	case []byte:
		if v == nil {
			return nil, nil
		}
		return append([]byte{}, v...), nil
	case bool:
		if v {
			return []byte("t"), nil
		}
		return []byte("f"), nil
	case int:
		return strconv.AppendInt(nil, int64(v), 10), nil
	case int8:
		return strconv.AppendInt(nil, int64(v), 10), nil
	case int16:
		return strconv.AppendInt(nil, int64(v), 10), nil
	case int32:
		return strconv.AppendInt(nil, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(nil, v, 10), nil
	case uint:
		return strconv.AppendUint(nil, uint64(v), 10), nil
	case uint8:
		return strconv.AppendUint(nil, uint64(v), 10), nil
	case uint16:
		return strconv.AppendUint(nil, uint64(v), 10), nil
	case uint32:
		return strconv.AppendUint(nil, uint64(v), 10), nil
	case uint64:
		return strconv.AppendUint(nil, v, 10), nil
	case float32:
		return strconv.AppendFloat(nil, float64(v), 'g', -1, 32), nil
	case float64:
		return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
	case fmt.Stringer:
		return []byte(v.String()), nil
	}
	return nil, fmt.Errorf("unsupported argument type %T", a)
}
