package wire

// The server→client pump: relays upstream frames and runs local units at
// their barriers.

import (
	"encoding/binary"
	"errors"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

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
			if s.s2cRun == 0 && s.ur.Buffered() == 0 && s.ur.big {
				// The reply is over: back to small buffers.
				if s.cw.shrink() != nil {
					return "client_gone"
				}
				s.ur.shrink()
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
		if typ == msgReadyForQuery {
			s.s2cRun = 0
		} else {
			s.s2cRun += n + 5
		}
		inspect := typ
		if n > maxInspect {
			inspect = 0 // absurdly large: relay it without decoding
		}
		switch inspect {
		case msgReadyForQuery, msgParameterStatus, msgErrorResponse, msgBackendKeyData:
			body, err := s.readUpstreamBody(n)
			if err != nil {
				return s.upstreamLost(err)
			}
			if typ == msgReadyForQuery && len(body) == 1 {
				s.info.setTxStatus(body[0])
				s.batchErr = false
				s.payDebt()
			}
			if typ == msgParameterStatus {
				s.noteParameterStatus(body)
			}
			fatalErr := false
			if typ == msgErrorResponse {
				s.batchErr = true
				var er pgproto3.ErrorResponse
				if er.Decode(body) == nil {
					s.srv.metrics.ErrorSent("upstream", er.Code)
					if er.Severity == "FATAL" || er.Severity == "PANIC" {
						fatalErr = true
						s.logger().Debug("upstream FATAL", "sqlstate", er.Code, "message", er.Message)
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
			if s.s2cRun > growAfter && !s.ur.big {
				if s.cw.grow() != nil {
					return errClientWrite
				}
				s.ur.grow()
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
		s.logger().Warn("upstream protocol violation", "error", err)
	} else {
		s.logger().Info("upstream connection lost", "error", err)
	}
	s.cw.Write(encodeError(s.wbuf[:0], fatal(pgerr.ConnectionFailure, "lost connection to the upstream server"), false, nil))
	s.cw.Flush()
	return "upstream_error"
}
